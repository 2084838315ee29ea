"""MXNet's import with its operators' compiled code cached (training/mxnet_import.py): real processes, each importing
MXNet once, as main.py does."""
import json
import subprocess
import sys

from launcher.cluster import ROOT
from training.mxnet_import import PLACEHOLDER, with_handle

# What a process computes with the operators it registered: a generated ndarray function (Convolution), and a symbol
# built from generated symbol functions and run.
PROBE = """
import json, sys
{install}
import mxnet as mx
from training import mxnet_import
x = mx.nd.arange(16).reshape((1, 1, 4, 4))
w = mx.nd.ones((2, 1, 3, 3))
conv = mx.nd.Convolution(x, w, no_bias=True, kernel=(3, 3), num_filter=2).asnumpy().tolist()
s = mx.sym.FullyConnected(mx.sym.var("d"), num_hidden=1, no_bias=True, name="fc")
fc = s.eval(d=mx.nd.ones((1, 3)), fc_weight=mx.nd.array([[1, 2, 3]]))[0].asnumpy().tolist()
cache = mxnet_import.installed_cache()
print(json.dumps(dict(conv=conv, fc=fc, compiled=cache.compiled_here if cache else None)))
"""


def probe(cache_file=None):
    install = f"from training import mxnet_import; mxnet_import.install({str(cache_file)!r})" if cache_file else ""
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


def test_the_handle_goes_into_the_cached_code_of_the_function_it_calls():
    code = compile(f"def op(x):\n    return call({PLACEHOLDER}, x)\n", "<string>", "exec")
    namespace = {"call": lambda handle, x: (handle, x)}

    exec(with_handle(code, 12345), namespace)

    assert namespace["op"]("x") == (12345, "x")
