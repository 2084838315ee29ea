"""The state server's faults in real hand-started jobs: a restart, and logs a kill cut short. (A killed or failing
scheduler, server, worker or state server that stays down: tests/test_failure_matrix.py.)"""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from analysis import summary
from launcher.cluster import ROOT, start_state_server
from tests import logfactory
from tests.jobs import LENET_ARGS, finish, start_job, worker_folders

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others

def run_summary(base, network, mode):
    return subprocess.run([sys.executable, os.path.join(ROOT, "summary.py"), "-b", base, "-n", network, "-m", mode],
                          capture_output=True, text=True, timeout=60)


def outputs(group):
    return "\n".join(f"--- {p.name} (exit {p.poll()})\n{open(p.output).read()[-2000:]}" for p in group.procs)


def assert_summarized(base, network, mode, num_workers):
    """summary.py reads every worker's logs written so far."""
    result = run_summary(base, network, mode)

    assert result.returncode == 0, result.stderr
    with open(os.path.join(base, network, mode, summary.summary_file_name(mode))) as f:
        devices = json.load(f)["devices"]["node"]
    assert len(devices) == num_workers, devices.keys()
    assert all(device["iterations"] for device in devices.values())


def iteration_numbers(folder):
    return sorted(int(os.path.basename(path)[len("iter-"):-len(".txt")])
                  for path in glob.glob(os.path.join(folder, "iter-*.txt")))


def start_esync(processes, log_dir, sync_timeout, max_time, policy="apply", mode="esync"):
    """A 2-worker esync (or nbsync) job with one worker 4x slower; returns (workers, state server process, port)."""
    port = start_state_server(processes)
    state_server = processes.procs[-1]
    timeout = ["--sync-timeout", str(sync_timeout)]
    args = ["--max-time", str(max_time), "-e", "0", "-port", str(port), *timeout]
    args += ["--esync-policy", policy] if mode == "esync" else []
    workers = start_job(processes, mode, LENET_ARGS + args, num_workers=2, slowdowns=[1, 4], log_dir=log_dir,
                        ps_args=timeout)
    for worker in workers:
        assert processes.wait_for_output(worker, "iter ", timeout=120), outputs(processes)
    return workers, state_server, port


@pytest.mark.slow
# The plan policy's requests go through the same client; a resumed job's readiness rule has its unit test
# (test_state_server_coordinator.py).
@pytest.mark.parametrize("mode, policy", [("esync", "apply"), ("nbsync", None)])
def test_training_goes_on_when_the_state_server_restarts(processes, tmp_path, mode, policy):
    base = str(tmp_path / "logs")
    log_dir = os.path.join(base, "lenet", mode)
    workers, state_server, port = start_esync(processes, log_dir, sync_timeout=30, max_time=4, policy=policy,
                                              mode=mode)
    time.sleep(1)

    os.kill(state_server.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    time.sleep(1)
    start_state_server(processes, port=port, name="state-server-restarted")
    print(f"state server answered again {time.monotonic() - killed_at:.1f} s after the kill")

    finish(processes, workers, timeout=120)
    logged = [iteration_numbers(folder) for folder in worker_folders(log_dir)]
    assert len(logged) == 2 and logged[0] == list(range(1, len(logged[0]) + 1)) and logged[1] == logged[0]
    worker_outputs = "".join(open(w.output).read() for w in workers)
    assert "lost the job (restarted?): sending /init/ again" in worker_outputs
    assert_summarized(base, "lenet", mode, num_workers=2)


def test_summary_reads_logs_cut_short_by_a_kill(tmp_path):
    base = str(tmp_path)
    written = logfactory.write_run(base, "sync", nodes=("node",), devices=("cpu", "gpu0"))
    (early, early_records), (cut, cut_records) = sorted(written.items())
    folder = os.path.join(base, logfactory.NETWORK, "sync", *early)
    for iteration in sorted(early_records)[len(early_records) // 2:]:  # this worker stopped halfway
        os.remove(os.path.join(folder, f"iter-{iteration}.txt"))
    folder = os.path.join(base, logfactory.NETWORK, "sync", *cut)
    last = max(cut_records)
    os.remove(os.path.join(folder, f"iter-{last}.txt"))
    with open(os.path.join(folder, f".iter-{last}.txt.k3j9.tmp"), "w") as f:  # a write the kill interrupted
        f.write('{"num_iters": 1, "ti')

    result = run_summary(base, logfactory.NETWORK, "sync")

    assert result.returncode == 0, result.stderr
    with open(os.path.join(base, logfactory.NETWORK, "sync", "Sync.json")) as f:
        devices = json.load(f)["devices"]["node"]
    assert devices[early[1]]["iterations"] == sorted(early_records)[:len(early_records) // 2]
    assert devices[cut[1]]["iterations"] == sorted(cut_records)[:-1]
