"""The concurrent standalone limit of a heterogeneous cluster: each worker's samples/s when it trains alone under
its own slowdown while all of them run at once, without communicating. On a machine with fewer cores than
workers this, not the sum of their speeds each taken alone, is what a cluster could at best train; a scheme's
efficiency is its cluster samples/s over this sum.
"""
import os

from launcher.cluster import ROOT, ProcessGroup
from training import modes, runlog
from training.devices import threads

MAIN_PY = os.path.join(ROOT, "main.py")
GRACE = 120.0   # seconds a standalone run may take beyond its training time (start-up, the final evaluation)


class LimitFailed(Exception):
    """A standalone run failed; the message names its output folder."""


def standalone_argv(index, slowdown, seconds, log_dir, job_args, device_share=None):
    quota = ["--device-share", f"{device_share:g}"] if device_share else []
    return ([MAIN_PY, "-m", modes.STANDALONE, *job_args, "-c", "1", "--slowdown", str(slowdown), *quota,
             "--max-time", str(seconds), "-e", "0", "-ld", log_dir, "--node-name", f"w{index}"])


def concurrent_standalone(slowdowns, seconds, workdir, job_args, device_share=None):
    """[samples/s of each worker] trained alone by `main.py -m local JOB-ARGS` under its slowdown (on its device's CPU
    quota with `device_share`), all at once, one compute thread each (as every cluster worker); `job_args` name the
    network and data (-n, --dataset, -dd, ...)."""
    logs = os.path.join(workdir, "standalone")
    with ProcessGroup(os.path.join(workdir, "standalone-processes")) as group:
        procs = [group.start_python(f"local{i}", standalone_argv(i, factor, seconds, logs, job_args, device_share),
                                    threads.ONE_THREAD)
                 for i, factor in enumerate(slowdowns)]
        if not group.wait(procs, seconds + GRACE) or any(p.poll() != 0 for p in procs):
            raise LimitFailed(f"the concurrent standalone runs failed; see {group.out_dir}")
    speeds = []
    for index in range(len(slowdowns)):
        records = runlog.DeviceLog(device_folder(workdir, index)).ordered()
        speeds.append(sum(r["num_samples"] for r in records) / records[-1]["total_time"])
    return speeds


def device_folder(workdir, index):
    """The iteration logs of the concurrent standalone run of worker `index`."""
    return os.path.join(workdir, "standalone", f"w{index}", "cpu")
