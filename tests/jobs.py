"""Start real ps-lite jobs the way the README tells a user to: one process per role, DMLC variables set."""
import glob
import os
import sys
import time

from launcher.cluster import ROOT, start_ps_job
from training import runlog

SAMPLE_DATA = os.path.join(ROOT, "data")
LENET_ARGS = ["-n", "lenet", "--dataset", "mnist-5k", "-dd", SAMPLE_DATA, "-c", "1"]


def start_job(group, mode, worker_args, num_workers=2, num_servers=1, slowdowns=None, log_dir=None, ps_args=(),
              envs=None):
    """Scheduler, servers and workers of one job; returns the worker processes. `ps_args` go to the scheduler and
    servers, `envs` ({process name: variables}) to the processes named."""
    main = os.path.join(ROOT, "main.py")
    workers_argv = [[main, "-m", mode, "-ld", log_dir, "--node-name", "node"] + list(worker_args)
                    + (["--slowdown", str(slowdowns[w])] if slowdowns else []) for w in range(num_workers)]
    return start_ps_job(group, [main, "-m", mode, *ps_args], workers_argv, num_servers, envs=envs)


def finish(group, workers, timeout):
    """Wait for the workers, then for scheduler and servers; fail with their output if anything went wrong."""
    finished = group.wait(workers, timeout)
    outputs = "\n".join(f"--- {p.name} (exit {p.poll()})\n{open(p.output).read()[-3000:]}" for p in group.procs)
    assert finished, f"workers still running after {timeout} s\n{outputs}"
    assert all(p.poll() == 0 for p in workers), outputs
    ps_roles = [p for p in group.procs if p.role in ("scheduler", "server")]
    assert group.wait(ps_roles, 30), f"scheduler/servers did not exit after the workers\n{outputs}"
    assert all(p.poll() == 0 for p in ps_roles), f"scheduler/servers failed after the workers\n{outputs}"
    return outputs


def run_main(args, env=None, timeout=60):
    import subprocess

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_") and k != "PORT"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, os.path.join(ROOT, "main.py")] + list(args), cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def worker_folders(log_dir):
    return sorted(glob.glob(os.path.join(log_dir, "node", "*-worker*")))


def iter_records(folder):
    """Round records of one worker folder, in round order."""
    return runlog.DeviceLog(folder).ordered()


def meta(folder):
    return runlog.read_meta(folder)


def wait_until(condition, timeout, poll=0.1):
    """True once condition() is, False if it still is not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return False


def logged_a_round(log_dir, workers):
    """Every one of the `workers` of the job logging to `log_dir` has finished its first round."""
    folders = worker_folders(log_dir)
    return len(folders) == workers and all(os.path.exists(runlog.round_path(f, 1)) for f in folders)
