"""Faults in real hand-started jobs: a killed process ends every other one with a message, and the logs written so
far stay readable."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import summary
from cluster import ROOT
from tests.jobs import LENET_ARGS, start_job, worker_folders

SYNC_TIMEOUT = 5
GIVE_UP_MESSAGES = ("no connection to", "no answer for")


def run_summary(base, network, mode):
    return subprocess.run([sys.executable, os.path.join(ROOT, "summary.py"), "-b", base, "-n", network, "-m", mode],
                          capture_output=True, text=True, timeout=60)


def outputs(group):
    return "\n".join(f"--- {p.name} (exit {p.poll()})\n{open(p.output).read()[-2000:]}" for p in group.procs)


def start_training(processes, log_dir):
    timeout = ["--sync-timeout", str(SYNC_TIMEOUT)]
    workers = start_job(processes, "sync", LENET_ARGS + ["--max-time", "300", "-e", "0", *timeout],
                        num_workers=2, log_dir=log_dir, ps_args=timeout)
    for worker in workers:
        assert processes.wait_for_output(worker, "iter ", timeout=120), outputs(processes)
    return workers


def pick(processes, workers, victim):
    return {"worker": workers[1], "server": processes.procs[1], "scheduler": processes.procs[0]}[victim]


@pytest.mark.parametrize("victim", ["worker", "server", "scheduler"])
def test_every_survivor_of_a_killed_process_exits_with_a_message(processes, tmp_path, victim):
    base = str(tmp_path / "logs")
    workers = start_training(processes, os.path.join(base, "lenet", "sync"))
    killed = pick(processes, workers, victim)
    survivors = [p for p in processes.procs if p is not killed]

    os.kill(killed.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    all_exited = processes.wait(survivors, timeout=SYNC_TIMEOUT + 10)
    elapsed = time.monotonic() - killed_at

    assert all_exited, f"still running {SYNC_TIMEOUT + 10} s after the kill\n{outputs(processes)}"
    print(f"survivors of the killed {victim} exited {elapsed:.1f} s after the kill")
    for survivor in survivors:
        output = open(survivor.output).read()
        assert survivor.poll() not in (None, 0), outputs(processes)
        assert any(message in output for message in GIVE_UP_MESSAGES), f"{survivor.name}\n{output}"
    assert_summarized(base, "lenet", "sync", num_workers=2)


def assert_summarized(base, network, mode, num_workers):
    """summary.py reads every worker's logs written so far."""
    result = run_summary(base, network, mode)

    assert result.returncode == 0, result.stderr
    with open(os.path.join(base, network, mode, summary.summary_file_name(mode))) as f:
        devices = json.load(f)["devices"]["node"]
    assert len(devices) == num_workers, devices.keys()
    assert all(device["iterations"] for device in devices.values())
