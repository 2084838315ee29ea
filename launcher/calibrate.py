"""`launch.py calibrate`: a cluster measured for the virtual clock, written to a file runs are charged from.

`launch.py calibrate [--out FILE] LAUNCHER-OPTIONS` measures on this machine what the virtual clock charges:

| field | what | how |
|---|---|---|
| step_seconds, overhead_seconds | a fast step's own phases; the loop's work between steps | the fastest worker alone on its device and CPU quota (`main.py -m local`, launcher/comm_ratio.py) |
| jitter | the log-normal spread of a step's seconds | the same steps' log seconds, interquartile range / 1.349 |
| round_trip_seconds | a request to the state server's rules | the Django state server as the launcher runs it, /apply/ from as many client processes as the experiment has workers, at once; the median |
| server_apply_seconds_per_mb | a parameter server adding a pushed megabyte into its sum | MXNet's in-place addition of arrays of the model's size, as ps-lite's servers merge pushes; the median |

How a run takes its charges from the file: launcher/calibration.py.
"""
import json
import multiprocessing
import os
import shlex
import socket
import statistics
import sys
import tempfile
import time

from launcher import comm_ratio, experiment
from launcher.calibration import batch_size_of
from launcher.cluster import STATE_TOKEN_VARIABLE, ProcessGroup, start_state_server
from training import modes
from training.checks import OneLineErrorParser, UsageError, first_sentence
from training.faults.failures import EXIT_FAILURE, EXIT_USAGE
from training.files import write_json

ROUND_TRIP_CALLS = 100          # /apply/ requests each client times
ROUND_TRIP_CLIENTS = 8          # at most this many client processes at once
APPLY_REPEATS = 50
TOKEN, JOB = "a-calibration-token-of-24-characters", "calibrate"  # as a launcher job's requests carry them
# The run's attribute, the file's field and what the run is charged without either: the charges beside the step.


def calibrate(argv):
    """`launch.py calibrate [--out FILE] LAUNCHER-OPTIONS`: what the virtual clock charges, measured here (the table
    above) and written to FILE for `--clock virtual --step-seconds FILE`. Exit 0, 1 where a measurement failed,
    2 for bad input."""
    try:
        out, run = parse_calibration(argv)
        probe = comm_ratio.measure(run)
        with tempfile.TemporaryDirectory(prefix="esync-calibrate-") as workdir:
            round_trip = round_trip_seconds(min(run.num_workers, ROUND_TRIP_CLIENTS), ROUND_TRIP_CALLS, workdir)
        apply = server_apply_seconds_per_mb(probe.model_bytes)
    except UsageError as error:
        print(f"launch.py calibrate: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except comm_ratio.MeasurementFailed as error:
        print(f"launch.py calibrate: {str(error).replace('--comm-ratio: ', '')}", file=sys.stderr)
        return EXIT_FAILURE
    record = {"network": run.network, "dataset": run.dataset, "batch_size": batch_size_of(run.worker_args),
              "step_seconds": probe.step, "overhead_seconds": max(0.0, probe.period - probe.step),
              "period_seconds": probe.period, "compute_seconds": probe.compute, "jitter": probe.jitter,
              "round_trip_seconds": round_trip, "server_apply_seconds_per_mb": apply,
              "model_bytes": probe.model_bytes, "steps": comm_ratio.PROBE_STEPS,
              "device": run.cluster.devices[run.cluster.fastest_worker], "device_share": run.cluster.device_share,
              "devices_described": run.cluster.devices_described, "measured_on": socket.gethostname(),
              "command": "python launch.py calibrate " + shlex.join(argv)}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_json(out, record, indent=1)
    print(json.dumps(record, indent=1))
    print(f"a step of {run.network} at batch {record['batch_size']}: {probe.step * 1e3:.2f} ms (jitter "
          f"{probe.jitter:.3f}); a request to the state server {round_trip * 1e3:.2f} ms; a server adds a pushed MB in "
          f"{apply * 1e3:.2f} ms; written to {out}")
    return 0


def parse_calibration(argv):
    """(the file to write, the Experiment whose fast step is measured) of `launch.py calibrate`'s arguments."""
    p = OneLineErrorParser(prog="launch.py calibrate", description=first_sentence(__doc__))
    p.add_argument("--out", default="devices.json", help="the file to write (default devices.json)")
    ns, rest = p.parse_known_args(argv)
    return ns.out, experiment.parse(["--modes", modes.STANDALONE, "--max-iters", str(comm_ratio.PROBE_STEPS),
                                           *rest])


# ----------------------------------------------------------------------------------------------
# The state server's round trip and a server's addition


def round_trip_seconds(num_clients, calls, workdir):
    """The median /apply/ round trip of `num_clients` client processes calling at once (workers are processes:
    threads of one would wait for each other's interpreter lock), each request with a job's token and id."""
    return statistics.median(apply_latencies(num_clients, calls, workdir))


def apply_latencies(num_clients, calls, workdir):
    """Every /apply/ round trip of `num_clients` client processes, `calls` each, in seconds, sorted."""
    from coordination.client import StateClient

    with ProcessGroup(os.path.join(workdir, "state-server"), {STATE_TOKEN_VARIABLE: TOKEN}) as group:
        port = start_state_server(group)
        with StateClient("127.0.0.1", port, token=TOKEN, job=JOB) as admin:
            admin.init(num_clients)
        context = multiprocessing.get_context("fork")
        start, results = context.Barrier(num_clients), context.Queue()
        clients = [context.Process(target=_timed_applies, args=(port, rank, calls, start, results))
                   for rank in range(num_clients)]
        for client in clients:
            client.start()
        latencies = [results.get(timeout=60 + calls) for _ in clients]
        for client in clients:
            client.join()
    return sorted(x for per_client in latencies for x in per_client)


def _timed_applies(port, rank, calls, start, results):
    from coordination.client import StateClient

    latencies = []
    with StateClient("127.0.0.1", port, token=TOKEN, job=JOB) as client:
        client.state()  # connected before the clock starts
        start.wait()
        for k in range(1, calls + 1):
            begun = time.perf_counter()
            client.apply(rank, k, 0.01 * (rank + 1), time.time())
            latencies.append(time.perf_counter() - begun)
    results.put(latencies)


def server_apply_seconds_per_mb(model_bytes, repeats=APPLY_REPEATS):
    """The median seconds MXNet takes to add a pushed copy of the model into a sum in place, per megabyte."""
    from mxnet import nd

    count = max(1, model_bytes // 4)
    total, pushed = nd.zeros((count,)), nd.ones((count,))
    total.wait_to_read()
    seconds = []
    for _ in range(repeats):
        begun = time.perf_counter()
        total += pushed
        total.wait_to_read()
        seconds.append(time.perf_counter() - begun)
    return statistics.median(seconds) * 1e6 / (4 * count)
