"""Every place the project reaches past MXNet 1.9.1's public Python API, each with its reason; no other module names
a private MXNet attribute or calls MXNet's C library.

- **The import hook**: MXNet's operators' generated code, compiled once per machine instead of per process.
- **The C library**: loading it as the package would, its errors, and a kvstore node's server loop
  (training/transport/ps_node.py runs the scheduler and the servers through it).
- **The kvstore's barrier**, which the Python API has only as `_barrier`.
- **A Trainer's optimizer state without its pickled optimizer**: the updaters and the update counts; and whether its
  rule is plain SGD (`plain_sgd`), which the Trainer says only through its optimizer.
- **A block's parameters by their structural names**, the names `save_parameters` writes.
- **A split into existing arrays**: the BatchNorm statistics unpacked in one operation.

The import hook: `import mxnet` writes a Python function for each of its operators (about 2,300), from what the C
library says of each, and compiles it: most of the CPU the import costs every worker a job starts. The function of an
operator differs from one process to the next only in its handle (an address), so its compiled code and docstring are
cached in a file with a placeholder for the handle, and the handle is put into the constants of the cached code when
it is used; neither the source nor the code is made again. The cache of a generating module holds the size and
modification time of MXNet's library and of the module, so a changed MXNet generates anew (and each installed MXNet
package has a file of its own). main.py installs it before anything imports MXNet; `install` only registers an import
hook. SciPy, which the reports need, is hidden from MXNet's import (`scipy_hidden`), and the modules MXNet imports
for what the project never does (downloads, ONNX, text embeddings, quantization, its own tests) are imported when
first used. While the package is imported the garbage collector is off, and what the import made stays out of every
later collection (gc.freeze): a standalone run of 150 lenet steps spent 0.011 s of CPU collecting instead of 0.058 s
(three runs each, timed by gc.callbacks), `import mxnet` 0.005 s instead of 0.035 s.
Measured with farm-bench, 12 runs each in turn: `import mxnet` 0.60 s of CPU (median) against 0.87 s when the
cache held compiled code only and the source was generated again; a launcher run of 1 s of training (2 workers,
a server, a scheduler, the evaluator) 5.4 s of CPU against 6.5 s. The stand-ins for the unused modules beyond
`requests`: 0.55 s against 0.60 s (15 runs each). Reading the cache file whole before unmarshalling it, instead of
letting marshal read the file object piecewise: a one-step standalone run 0.95 s of CPU against 1.15 s (medians of 15).
"""
import contextlib
import ctypes
import gc
import importlib
import importlib.machinery
import logging
import marshal
import os
import re
import sys
import tempfile
import types
import zlib

log = logging.getLogger("mxnet-import")

# The modules whose functions write an operator's Python source, and the function in each.
GENERATORS = {"mxnet.ndarray.register": "_generate_ndarray_function_code",
              "mxnet.symbol.register": "_generate_symbol_function_code"}
HANDLE = re.compile(r"((?:_imperative_invoke|_symbol_creator)\()(\d+),")   # where the handle is in that source
PLACEHOLDER = 987654321987654321
HOOKED_MODULES = ("mxnet", "mxnet.base")
# Imported by MXNet's package, used by none of the project's processes: {module: what MXNet uses it for}.
UNUSED_MODULES = {"requests": "downloads", "mxnet.contrib.onnx": "ONNX import and export",
                  "mxnet.contrib.text": "text embeddings", "mxnet.contrib.quantization": "quantization",
                  "mxnet.test_utils": "MXNet's own tests"}


def cache_path():
    """A file per installed MXNet package: virtualenvs side by side do not rewrite each other's cache."""
    from training.files import cache_folder

    spec = importlib.machinery.PathFinder.find_spec("mxnet")
    package = f"{zlib.crc32(os.path.dirname(spec.origin).encode()):08x}" if spec and spec.origin else "none"
    return os.path.join(cache_folder(), f"functions-{sys.implementation.cache_tag}-{package}.marshal")


class OperatorCache:
    """{generating module: (the files it was generated from, {(operator, function name): (code, docstring)})}."""

    def __init__(self, path):
        self.path = path
        self._modules = None      # read when MXNet is first imported: a scheduler never imports it
        self.added = 0            # compiled since the last save
        self.compiled_here = 0    # compiled by this process

    @property
    def modules(self):
        if self._modules is None:
            self._modules = self._read()
        return self._modules

    def _read(self):
        try:
            with open(self.path, "rb") as f:
                modules = marshal.loads(f.read())  # marshal.load(f) reads a file piecewise: ten times the CPU
        except (OSError, ValueError, EOFError, TypeError):
            return {}
        return modules if isinstance(modules, dict) else {}

    def functions_of(self, module):
        """The cached functions of a generating module, emptied where MXNet's library or the module changed."""
        sources = source_files(module)
        cached = self.modules.get(module.__name__)
        if not (isinstance(cached, tuple) and len(cached) == 2 and cached[0] == sources):
            cached = self.modules[module.__name__] = (sources, {})
        return cached[1]

    def generator(self, module):
        """The module's generator of an operator's (source, docstring), answering from the cache with the code
        compiled and the handle in place (the module's exec takes code as it takes source)."""
        generate = getattr(module, GENERATORS[module.__name__])
        functions = self.functions_of(module)

        def generate_cached(handle, op_name, func_name, signature_only=False):
            if signature_only:  # stub files for editors: source wanted
                return generate(handle, op_name, func_name, signature_only)
            cached = functions.get((op_name, func_name))
            if cached is None:
                source, doc = generate(handle, op_name, func_name)
                if not HANDLE.search(source):
                    return source, doc
                template = HANDLE.sub(lambda m: f"{m.group(1)}{PLACEHOLDER},", source, count=1)
                cached = functions[(op_name, func_name)] = (compile(template, "<string>", "exec"), doc)
                self.added += 1
                self.compiled_here += 1
            code, doc = cached
            return with_handle(code, handle.value), doc  # the source has the handle's address
        return generate_cached

    def save(self):
        """Write the cache if this process compiled anything (atomically: processes start side by side)."""
        if not self.added:
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=os.path.dirname(self.path), suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                marshal.dump(self.modules, f)
            os.replace(temporary, self.path)
        except OSError as err:  # a read-only home: every process compiles, as without the cache
            log.debug("cannot write the operator cache %s: %s", self.path, err)
        self.added = 0


def source_files(module):
    """What a generating module's output depends on: MXNet's C library (its operators) and the module itself, each
    by path, size and modification time."""
    library = sys.modules["mxnet.base"]._LIB._name  # loaded by mxnet.base, which every generating module imports
    return tuple((path, stat.st_size, stat.st_mtime_ns)
                 for path in (library, module.__file__) for stat in [os.stat(path)])


def with_handle(code, handle):
    """`code` with the placeholder among its (and its functions') constants replaced by `handle`."""
    constants = tuple(handle if type(c) is int and c == PLACEHOLDER else
                      with_handle(c, handle) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_consts=constants)


class _Loader(importlib.machinery.SourceFileLoader):
    cache = None

    def exec_module(self, module):
        if module.__name__ == "mxnet.base":
            super().exec_module(module)
            module._init_op_module = self._registering_from_the_cache(module._init_op_module)
            return
        with without_collections():
            define_numpy_aliases()  # here, not at install: a process that never loads MXNet need not load numpy
            with scipy_hidden():
                for name in UNUSED_MODULES:
                    sys.modules.setdefault(name, _ImportedOnFirstUse(name))
                super().exec_module(module)
        self.cache.save()  # the whole package has been imported: every operator is registered

    def _registering_from_the_cache(self, init_op_module):
        """mxnet.base's registration of a generating module's operators (each generating module calls it as its
        last line): the module's generator answers from the cache from then on."""
        def init_from_the_cache(root_namespace, module_name, make_op_func):
            namespace = make_op_func.__globals__  # the generating module's, whose generator make_op_func calls
            name = GENERATORS.get(namespace["__name__"])
            if name is not None:
                namespace[name] = self.cache.generator(sys.modules[namespace["__name__"]])
            return init_op_module(root_namespace, module_name, make_op_func)
        return init_from_the_cache


class _Finder:
    def __init__(self, cache):
        self.cache = cache

    def find_spec(self, fullname, path, target=None):
        if fullname not in HOOKED_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        loader = _Loader(spec.loader.name, spec.loader.path)
        loader.cache = self.cache
        spec.loader = loader
        return spec


class _ImportedOnFirstUse(types.ModuleType):
    """Stands in for a module of UNUSED_MODULES (`requests` alone costs about 0.1 s of CPU to import): the first
    attribute read imports the real one, which takes the stand-in's place in sys.modules."""

    def __init__(self, name):
        super().__init__(name)
        self.__spec__ = None  # a later `import` finds it loaded and leaves it be

    def __getattr__(self, attr):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


@contextlib.contextmanager
def without_collections():
    """The garbage collector off for the block, and what it made kept out of every later collection: MXNet's package
    makes objects (the operators' functions, the modules) that live as long as the process, and collecting while
    they are made, then visiting them at every full collection of the training, costs CPU for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def scipy_hidden():
    """SciPy unimportable for the time of the block, unless this process imported it already. MXNet's package imports
    scipy.sparse, scipy.stats and SciPy's testing helpers where SciPy is installed (the reports' significance tests
    need it), which costs every MXNet process about 0.4 s of CPU, a third of its import (measured); they serve
    conversions to SciPy's sparse matrices, quantization and MXNet's own tests, none of which the project uses."""
    if "scipy" in sys.modules:
        yield
        return
    sys.modules["scipy"] = None  # an import of it raises ImportError
    try:
        yield
    finally:
        del sys.modules["scipy"]


def installed_cache():
    """The cache this process's import hook serves from, or None."""
    return next((finder.cache for finder in sys.meta_path if isinstance(finder, _Finder)), None)


def install(path=None):
    """Serve MXNet's operator code from the cache from now on (before MXNet is imported); MXNet 1.9.1 imported
    beside numpy 1.24 and later too."""
    if mxnet_executed() or installed_cache():
        return
    if "mxnet" in sys.modules:  # registered to load lazily before this hook: its loader is not the hook's
        define_numpy_aliases()
    use_the_standard_distutils()
    sys.meta_path.insert(0, _Finder(OperatorCache(path or cache_path())))


def mxnet_executed():
    """Whether MXNet's package has been imported, not only registered to load at its first use by training/lazy.py
    (a mode module named in ESYNC_MODE_MODULES registers it before main() installs the hook)."""
    module = sys.modules.get("mxnet")
    return module is not None and type(module).__name__ != "_LazyModule"


NUMPY_ALIASES = {"bool": bool, "int": int, "float": float, "object": object, "complex": complex, "str": str}


def define_numpy_aliases():
    """MXNet 1.9.1 reads numpy.bool, .int, .float and .object at import, aliases numpy 1.24 removed (and numpy
    1.23.5, the last with them, has no wheel for Python 3.12): give them back their old meaning, the builtins."""
    import numpy

    for name, value in NUMPY_ALIASES.items():
        if name not in numpy.__dict__:
            setattr(numpy, name, value)


def use_the_standard_distutils():
    """MXNet imports distutils.version; setuptools' stand-in for distutils costs about 0.15 s of CPU to import, the
    standard library's (still in Python 3.11) next to nothing. Setuptools reads SETUPTOOLS_USE_DISTUTILS when the
    interpreter starts (its .pth file puts the stand-in's finder first on sys.meta_path): the variable serves the
    processes this one starts, and this one takes the finder out. Python 3.12 has no distutils of its own: there the
    stand-in is MXNet's only one (requirements.txt installs setuptools on 3.12)."""
    if sys.version_info >= (3, 12):
        return
    os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
    if os.environ["SETUPTOOLS_USE_DISTUTILS"] == "stdlib" and "distutils" not in sys.modules:
        hack = sys.modules.get("_distutils_hack")
        if hack is not None and hasattr(hack, "remove_shim"):
            hack.remove_shim()


# ----------------------------------------------------------------------------------------------
# The C library


class MXNetLibraryError(RuntimeError):
    pass


# The callback a kvstore server runs for a command a worker sent (kv.set_optimizer sends SET_OPTIMIZER).
CONTROLLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
SET_OPTIMIZER = 0


def library():
    """MXNet's C library, loaded as the mxnet package would load it (the same file, so the same library), without
    importing the package: with DMLC_ROLE=server or scheduler the import itself would run the role."""
    # The path finder, not importlib.util.find_spec: that would read the spec of the lazily registered module
    # (training/lazy.py), which imports MXNet.
    path = os.environ.get("MXNET_LIBRARY_PATH") or os.path.join(
        importlib.machinery.PathFinder.find_spec("mxnet").submodule_search_locations[0], "libmxnet.so")
    lib = ctypes.CDLL(path, ctypes.RTLD_LOCAL)
    lib.MXGetLastError.restype = ctypes.c_char_p
    return lib


def check(lib, code):
    if code != 0:
        raise MXNetLibraryError(lib.MXGetLastError().decode(errors="replace"))


def gpu_count():
    """The GPUs MXNet sees (mx.context.num_gpus()), asked of the C library without the package's second of import."""
    lib, count = library(), ctypes.c_int()
    check(lib, lib.MXGetGPUCount(ctypes.byref(count)))
    return count.value


def serve_kvstore(lib, controller):
    """Create this node's distributed kvstore and run its server loop (the scheduler's or a server's, by
    DMLC_ROLE) until every worker has left; `controller(command, body, kvstore handle)` receives the workers'
    commands. Returns the kvstore's handle."""
    handle = ctypes.c_void_p()
    check(lib, lib.MXKVStoreCreate(b"dist", ctypes.byref(handle)))
    callback = CONTROLLER(lambda command, body, _: controller(command, body, handle))
    check(lib, lib.MXKVStoreRunServer(handle, callback, None))
    return handle


def kvstore_of(mx, handle):
    """The Python kvstore around a handle the C library created (the server's, to hold the workers' update rule)."""
    return mx.kvstore.KVStore(handle)


def leave_to_the_process_end(kv):
    """MXNet 1.9.1 crashes freeing a server's kvstore that holds an update rule: the Python wrapper's destructor is
    given nothing to free, and the kvstore ends with the process."""
    kv.handle = ctypes.c_void_p()


# ----------------------------------------------------------------------------------------------
# The kvstore, the Trainer, a block's parameters


def barrier(kv):
    """Wait until every worker of the job reaches this point: KVStore's Python API has it only as `_barrier`."""
    kv._barrier()


def trainer_updaters(trainer):
    """The per-device updaters of a gluon.Trainer. Its public save_states/load_states carry the pickled optimizer,
    which would bring back an earlier run's learning rate and momentum: the states alone are reached here."""
    return trainer._updaters


def plain_sgd(trainer):
    """Whether the Trainer's update is w - lr x rescale x g, nothing else: MXNet's SGD itself (not a rule built on
    it) with no momentum, weight decay, clipping, second precision or per-parameter learning rate."""
    rule = trainer._optimizer
    return (type(rule).__name__ == "SGD" and not rule.momentum and not rule.wd and rule.clip_gradient is None
            and not rule.multi_precision and all(mult == 1.0 for mult in rule.lr_mult.values()))


def update_counts(trainer, ctx):
    """{weight index: updates so far} of the Trainer's optimizer on `ctx` (the dict the optimizer itself counts in,
    one per device). They live on the optimizer, not in the updaters' states, and Adam's step size depends on them."""
    counts = trainer._optimizer._all_index_update_counts
    return counts.setdefault(ctx.device_id, {})


def parameters_by_name(net):
    """{structural name: Parameter} of a block, the names save_parameters writes and load_parameters reads (the
    public collect_params() names carry the block's prefix instead)."""
    return net._collect_params_with_prefix()


def split_into(mx, source, outs, offsets):
    """Copy the consecutive parts of the 1-D `source` that start at `offsets` into the 1-D arrays `outs`, in one
    operation of MXNet's engine: the public split_v2 makes new arrays and has no `out`."""
    mx.nd._internal._split_v2(source, indices=tuple(offsets), axis=0, sections=0, squeeze_axis=False, out=outs)


def queue_update(trainer, indices, grads, weights, batch_size):
    """Trainer.update(batch_size) of its parameters `indices` alone, queued in MXNet's engine: per parameter, its
    copies on the devices (`weights`) updated from arrays beside them (`grads`) that the Trainer does not hold."""
    trainer._optimizer.rescale_grad = trainer._scale / batch_size
    for device, updater in enumerate(trainer._updaters):
        updater(list(indices), [copies[device] for copies in grads], [copies[device] for copies in weights])


FUSED_UPDATE_BELOW = 1 << 16  # parameters of fewer values are updated together, in fused calls


def update_groups(params):
    """Parameter indices grouped for queue_update: every small one in one group, which MXNet's SGD updates in fused
    multi_sgd_update calls of a few arrays each, and each large one alone. Measured per update, one OpenMP thread:
    lenet's 10 small arrays 0.19 ms fused against 0.45 ms one by one, mostly the optimizer's Python; resnet18-v1's
    11 M values 24 ms fused against 15 ms one by one, the fused kernel being the slower on large arrays."""
    small = [i for i, p in enumerate(params) if p.data().size < FUSED_UPDATE_BELOW]
    return ([small] if small else []) + [[i] for i in range(len(params)) if i not in small]
