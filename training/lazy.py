"""MXNet and NumPy, each loaded at its first use.

Every process imports the scheme it runs (and every scheme module where the mode table is made: training/mode_table.py);
a ps-lite scheduler or a summing server never needs MXNet's Python package, whose import costs about a second of CPU
(it generates and compiles its operators). The scheme modules therefore take `mx` from here: the package is
imported at the first attribute access (importlib's LazyLoader). A process that must import it with DMLC_ROLE hidden
forces the load itself (training/transport/ps_node.py). NumPy likewise (0.07 s of CPU a process): the modules a
scheduler or a server imports take `np` from here, since one plain `import numpy` elsewhere loads it.
"""
import importlib.util
import sys


def lazy_module(name):
    """The module `name`, executed at the first access to one of its attributes (at once if already imported)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


np = lazy_module("numpy")


def __getattr__(name):
    """`mx`, registered where a module first imports it: after main.py has installed MXNet's import hook
    (training/mxnet_internals.py), whose loader the registration keeps."""
    if name == "mx":
        return lazy_module("mxnet")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
