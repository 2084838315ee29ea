"""The launcher's workers: their devices (--devices), their slowdowns (--slowdown), the devices of fixed capacity
they run on (--device-share: a CPU quota each, or the sleeping slowdown where none can be given), and their
concurrent standalone limit.

The concurrent standalone limit of a heterogeneous cluster: each worker's samples/s when it trains alone under its
own slowdown while all of them run at once, without communicating. On a machine with fewer cores than workers this,
not the sum of their speeds each taken alone, is what a cluster could at best train; a scheme's efficiency is its
cluster samples/s over this sum.
"""
import argparse
import os

from launcher.cluster import ROOT, ProcessGroup
from launcher.commands import device_flags
from training import argtypes, modes, runlog
from training.checks import UsageError
from training.devices import threads

RESERVED_CORES = 0.5            # kept free of the device quotas: scheduler, servers, state server, evaluator
WITH_GROUPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "with-groups")


def parse_devices(devices, slowdown):
    """The --devices entries; without --devices one cpu per --slowdown factor."""
    if devices is None:
        if slowdown is None:
            raise UsageError("the following arguments are required: --devices (or --slowdown: one cpu worker "
                             "per factor)")
        return tuple("cpu" for _ in parse_factors(slowdown))
    entries = tuple(d.strip() for d in devices.split(","))
    for device in entries:
        device_flags(device)
    return entries


def parse_slowdowns(text, num_workers, flag="--slowdown"):
    """The workers' factors as given (text), one per worker; a single factor is every worker's."""
    factors = parse_factors(text, flag)
    if len(factors) == 1:
        factors *= num_workers
    if len(factors) != num_workers:
        raise UsageError(f"{flag} has {len(factors)} factors but --devices has {num_workers} workers")
    return factors


def parse_factors(text, flag="--slowdown"):
    """The devices' slowdown factors of a comma list, as text, one per device: each entry a factor of 1 or more, or
    NxF, F for N devices in a row ("48x1,16x4": 48 fast devices, then 16 four times slower). The one parser of every command's --slowdown, --profile and --profiles; UsageError (one line, naming
    `flag`) for anything else."""
    factors = []
    for entry in (part.strip() for part in str(text).split(",")):
        count, _, factor = entry.rpartition("x")
        try:
            repeat = int(count) if count else 1
            float(factor)
        except ValueError:
            raise UsageError(f"{flag} {text}: {entry!r} is neither a factor nor NxF (F for N devices)") from None
        if repeat < 1:
            raise UsageError(f"{flag} {text}: {entry!r} repeats a factor {repeat} times")
        try:
            argtypes.slowdowns(factor)  # the check a worker's --slowdown passes
        except argparse.ArgumentTypeError as err:
            raise UsageError(f"{flag}: {str(err).replace('--slowdown ', '')}") from None
        factors += [factor.strip()] * repeat
    return tuple(factors)


def device_share(slowdowns, given=None, sleeping=False, tracker=None):
    """(a fast device's cores under a CPU quota or None, the line that says how the devices are emulated) for workers
    of `slowdowns`. Without a `given` share: what fits the cores with RESERVED_CORES to spare, at most one core;
    where no CPU quota can be given (not root, no CPU controller) or none reaches the workers (the launcher does not
    start them with --tracker): the sleeping slowdown. MPI's ranks make their groups themselves on loopback and enter
    their workers' groups through launcher/in-namespace inside the namespaces; Hogwild!'s enter their workers' groups,
    which their coordinator hands them."""
    from training.devices import cpu_quota

    cores = len(os.sched_getaffinity(0))
    if given is not None and not 0 < given <= cores:
        raise UsageError(f"--device-share {given:g}: give a share of the {cores} core(s), above 0")
    if sleeping or tracker:
        why = "--sleeping-slowdown" if sleeping else f"--tracker {tracker} starts the workers"
        if given is not None:
            raise UsageError(f"--device-share puts the workers the launcher starts under CPU quotas: {why}")
        return None, f"slow devices sleep after each step ({why})"
    try:
        found = cpu_quota.controller()
    except cpu_quota.QuotaUnavailable as error:
        if given is not None:
            raise UsageError(f"--device-share needs a CPU quota: {error}")
        return None, f"slow devices sleep after each step (no CPU quotas: {error})"
    share = given or default_device_share(slowdowns, cores)
    return share, (f"CPU quotas: a fast device {share:.3g} of a core, one with --slowdown F that / F "
                   f"({found.describe()})")


def with_groups(groups):
    """The command prefix (launcher/with-groups) that opens each of {key: a worker's cgroup folder} for the process
    that starts the workers inside a network namespace, where they could not open it; [] for none."""
    entries = " ".join(f"{key}={group}" for key, group in groups.items())
    return [WITH_GROUPS, entries] if entries else []


def default_device_share(slowdowns, cores):
    """The largest share of a core (at most 1) at which every worker's quota fits the cores beside RESERVED_CORES."""
    demand = sum(1 / float(f) for f in slowdowns)
    return round(min(1.0, (cores - RESERVED_CORES) / demand), 3)


# ----------------------------------------------------------------------------------------------
# The concurrent standalone limit

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
