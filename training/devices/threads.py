"""How many OpenMP threads a process of a job computes with (OMP_NUM_THREADS, which MXNet's library reads once, when
it loads). Idle OpenMP threads spin before they sleep: a process with more threads than it has cores to itself takes
them from the processes beside it, so on a machine several processes share, each gets its share of the cores."""
import ipaddress
import os

VARIABLE = "OMP_NUM_THREADS"
# What the launcher gives each process it starts on one machine: the workers share its cores like separate devices.
ONE_THREAD = {VARIABLE: "1"}


def share(processes, cores=None):
    """Threads for each of `processes` sharing this machine's cores (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    return max(1, cores // processes)


def limit_compute_threads(role):
    """Set OMP_NUM_THREADS before MXNet's library is loaded, unless the environment sets it; returns what was set
    and why, or None."""
    threads, reason = compute_threads(role, os.environ, len(os.sched_getaffinity(0)))
    if not threads:
        return None
    os.environ[VARIABLE] = str(threads)
    return f"{threads} OpenMP thread(s), {reason}"


def compute_threads(role, env, cores):
    """(threads, why) for a ps-lite role, or (None, None) to keep MXNet's default."""
    if env.get(VARIABLE) or role is None:
        return None, None
    if not (on_loopback(env.get("DMLC_PS_ROOT_URI")) or on_loopback(env.get("DMLC_NODE_HOST"))):
        return None, None  # a machine of its own: a server summing or updating on a dedicated host uses its cores
    if role in ("scheduler", "server"):
        return 1, "as the role hardly computes beside the workers on this machine"
    workers = int(env["DMLC_NUM_WORKER"])
    return share(workers, cores), f"its share of {cores} core(s) among the job's {workers} workers on loopback"


def on_loopback(host):
    """A loopback address: the whole job runs on this machine."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
