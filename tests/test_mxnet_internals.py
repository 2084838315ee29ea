"""MXNet's internals in one module (training/mxnet_internals.py): no other module reaches past MXNet's public API;
its import with the operators' compiled code cached, in real processes, each importing MXNet once, as main.py
does."""
import json
import os
import re
import subprocess
import sys
import types

import pytest

from launcher.cluster import ROOT
from training import mxnet_internals
from training.mxnet_internals import PLACEHOLDER, with_handle

# What a process computes with the operators it registered: a generated ndarray function (Convolution), and a symbol
# built from generated symbol functions and run.
PROBE = """
import json, sys
{install}
import mxnet as mx
from training import mxnet_internals
x = mx.nd.arange(16).reshape((1, 1, 4, 4))
w = mx.nd.ones((2, 1, 3, 3))
conv = mx.nd.Convolution(x, w, no_bias=True, kernel=(3, 3), num_filter=2).asnumpy().tolist()
s = mx.sym.FullyConnected(mx.sym.var("d"), num_hidden=1, no_bias=True, name="fc")
fc = s.eval(d=mx.nd.ones((1, 3)), fc_weight=mx.nd.array([[1, 2, 3]]))[0].asnumpy().tolist()
cache = mxnet_internals.installed_cache()
scipy_by_mxnet = "scipy" in sys.modules
requests_by_mxnet = "urllib3" in sys.modules  # requests imports urllib3
unused_by_mxnet = sorted(m for m in mxnet_internals.UNUSED_MODULES if type(sys.modules.get(m)) is type(sys))
import scipy.stats
doc = mx.nd.Convolution.__doc__.splitlines()[0]
downloads = callable(mx.gluon.utils.requests.get)  # what Gluon's download calls
unused_work = all(map(callable, (mx.contrib.onnx.export_model, mx.contrib.text.embedding.create,
                                  mx.contrib.quantization.quantize_net, mx.test_utils.assert_almost_equal)))
print(json.dumps(dict(conv=conv, fc=fc, compiled=cache.compiled_here if cache else None, scipy=scipy_by_mxnet,
                      requests=requests_by_mxnet, doc=doc, downloads=downloads, unused=unused_by_mxnet,
                      unused_work=unused_work)))
"""


def probe(cache_file=None):
    # without the hook, numpy's aliases alone (which numpy 1.24 and later lack and MXNet reads)
    install = (f"from training import mxnet_internals; mxnet_internals.install({str(cache_file)!r})" if cache_file
               else "from training import mxnet_internals; mxnet_internals.define_numpy_aliases()")
    result = subprocess.run([sys.executable, "-c", PROBE.format(install=install)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_compiles_no_operator_and_computes_what_mxnet_computes_without_the_cache(tmp_path):
    cache_file = tmp_path / "operators.marshal"
    plain, first, second = probe(), probe(cache_file), probe(cache_file)

    assert first["compiled"] > 2000 and cache_file.exists()  # every generated operator, once
    assert second["compiled"] == 0
    assert plain["conv"] == first["conv"] == second["conv"] and plain["fc"] == first["fc"] == second["fc"] == [[6.0]]
    assert plain["doc"] == first["doc"] == second["doc"] and "convolution" in plain["doc"]
    # MXNet imports SciPy where it is installed; with the hook it does not, and SciPy still imports afterwards
    assert (plain["scipy"], first["scipy"], second["scipy"]) == (True, False, False)
    # requests, which MXNet uses to download only, is imported when first used
    assert (plain["requests"], first["requests"], second["requests"]) == (True, False, False)
    assert plain["downloads"] and first["downloads"] and second["downloads"]
    # so are the other modules MXNet imports for what the project never does, which work when used
    assert (plain["unused"], first["unused"], second["unused"]) == (sorted(mxnet_internals.UNUSED_MODULES), [], [])
    assert plain["unused_work"] and first["unused_work"] and second["unused_work"]


def test_operators_cached_from_another_mxnet_library_are_compiled_again(tmp_path, monkeypatch):
    files = [("libmxnet.so", 100, 1)]
    monkeypatch.setattr(mxnet_internals, "source_files", lambda module: tuple(files))
    register = types.ModuleType("mxnet.ndarray.register")
    cache = mxnet_internals.OperatorCache(str(tmp_path / "operators.marshal"))
    cache.functions_of(register)[("Convolution", "Convolution")] = (compile("x = 1", "<string>", "exec"), "doc")
    cache.added = 1
    cache.save()

    assert list(mxnet_internals.OperatorCache(cache.path).functions_of(register)) == [("Convolution", "Convolution")]
    files[0] = ("libmxnet.so", 100, 2)  # the same library file, written again
    assert mxnet_internals.OperatorCache(cache.path).functions_of(register) == {}


def test_the_handle_goes_into_the_cached_code_of_the_function_it_calls():
    code = compile(f"def op(x):\n    return call({PLACEHOLDER}, x)\n", "<string>", "exec")
    namespace = {"call": lambda handle, x: (handle, x)}

    exec(with_handle(code, 12345), namespace)

    assert namespace["op"]("x") == (12345, "x")


# What reaching past MXNet's public API looks like in this code base: its private attributes and its C library.
PRIVATE_MXNET = re.compile(r"\._barrier\(|\._updaters\b|\._optimizer\._|_collect_params_with_prefix|libmxnet|"
                           r"\.MX[A-Z][A-Za-z]+\(|kvstore\.KVStore\(")


def source_files():
    for folder, _, names in os.walk(ROOT):
        if any(part.startswith(".") or part in ("tests", "__pycache__") for part in
               os.path.relpath(folder, ROOT).split(os.sep)):
            continue
        yield from (os.path.join(folder, name) for name in names if name.endswith(".py"))


def test_no_module_but_mxnet_internals_reaches_past_mxnets_public_api():
    reaching = sorted(os.path.relpath(path, ROOT) for path in source_files()
                      if PRIVATE_MXNET.search(open(path, encoding="utf-8").read()))

    assert reaching == [os.path.join("training", "mxnet_internals.py")]


@pytest.mark.parametrize("line", ["self.kv._barrier()", "trainer._updaters[0]", "lib.MXKVStoreCreate(b'dist', h)",
                                  "net._collect_params_with_prefix()"])
def test_the_check_sees_a_private_call(line):
    assert PRIVATE_MXNET.search(line)


def test_on_python_3_12_mxnet_keeps_setuptools_stand_in_for_distutils_the_only_one_there(monkeypatch):
    monkeypatch.delenv("SETUPTOOLS_USE_DISTUTILS", raising=False)
    monkeypatch.setattr(sys, "version_info", (3, 12, 3, "final", 0))
    mxnet_internals.use_the_standard_distutils()
    # the processes it starts keep the stand-in too
    assert "SETUPTOOLS_USE_DISTUTILS" not in os.environ
    monkeypatch.setattr(sys, "version_info", (3, 11, 2, "final", 0))
    mxnet_internals.use_the_standard_distutils()
    assert os.environ["SETUPTOOLS_USE_DISTUTILS"] == "stdlib"




# As main.py starts a scheduler: its imports, the hook, the command line (whose mode table, where it is made, imports
# every scheme, each taking the lazy `mx`). Neither NumPy nor MXNet is loaded then; a scheme's first use of `mx`
# loads MXNet's package through the hook (without SciPy, which only the hook hides: registered before it, `mx` cost
# every worker about 0.5 s of CPU).
AS_A_SCHEDULER = """
import json, sys
import importlib.util
import main
from training import config, mxnet_internals
mxnet_internals.install()
config.build_parser()
numpy_loaded = type(sys.modules.get("numpy")) is not importlib.util._LazyModule
mxnet_loaded = mxnet_internals.mxnet_executed()
from training.lazy import mx
computes = bool(mx.nd.ones((2,)).sum().asscalar() == 2)
import gc
print(json.dumps(dict(numpy=numpy_loaded, mxnet=mxnet_loaded, computes=computes, scipy="scipy" in sys.modules,
                      collecting=gc.isenabled(), frozen=gc.get_freeze_count())))
"""


def test_a_scheduler_loads_neither_numpy_nor_mxnet_and_a_later_mx_loads_through_the_hook():
    result = subprocess.run([sys.executable, "-c", AS_A_SCHEDULER], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)

    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    # MXNet's package, once imported, lies outside every collection (its hundred thousand objects live as long as
    # the process), and the collector is on again
    assert found.pop("frozen") > 50_000 and found.pop("collecting")
    assert found == {"numpy": False, "mxnet": False, "computes": True, "scipy": False}
