"""Start the workers of a synchronous mode under MPICH's mpiexec (--collective ring, butterfly, binary-blocks): no
scheduler and no servers, each worker's rank from MPI.

On this machine's loopback, mpiexec.gforker forks every rank here (one process group for the whole job) and
listens nowhere; the ranks talk over shared memory and libfabric's tcp provider on lo. With --hosts netns, Hydra's
mpiexec runs in the first worker's namespace and starts a proxy in every worker's namespace through
`launcher/in-namespace` (its ssh stand-in); each namespace is a host of its own, so every byte crosses the shaped
links (the namespaces share one host name, which would otherwise let MPICH pick shared memory).
"""
import os
import sys

from launcher.cluster import ROOT
from launcher.workers import with_groups
from training.devices import threads

BIN = os.path.dirname(sys.executable)  # the mpich wheel installs its programs beside the interpreter
GFORKER = os.path.join(BIN, "mpiexec.gforker")
HYDRA = os.path.join(BIN, "mpiexec.hydra")
IN_NAMESPACE = os.path.join(ROOT, "launcher", "in-namespace")

# One compute thread per rank, as for ps-lite workers: the ranks share this machine's cores like separate devices.
RANK_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", **threads.ONE_THREAD}
LOOPBACK_ENV = {**RANK_ENV, "FI_TCP_IFACE": "lo"}


def namespaces_env(interface):
    return {**RANK_ENV, "FI_TCP_IFACE": interface, "MPIR_CVAR_NOLOCAL": "1"}


def mpmd(blocks):
    """mpiexec's MPMD arguments for `blocks` of (ranks, argv of a python program), ranks numbered in order."""
    argv = []
    for ranks, args in blocks:
        argv += ([":"] if argv else []) + ["-n", str(ranks), sys.executable, *args]
    return argv


def one_rank_each(argvs):
    return [(1, argv) for argv in argvs]


def start_job(group, argvs, placement=None, env=None, name="mpiexec", quotas=None):
    """One rank per argv (a python program's arguments), rank i running argvs[i]; on the workers' hosts of
    `placement` when they are namespaces, else here on loopback. `quotas[i]`: the (launcher/in-cgroup, group) of
    worker i's CPU quota, which its rank enters inside a namespace (on loopback each rank makes its own). Returns
    mpiexec's process, which exits once every rank has (non-zero when one failed)."""
    workers = placement.workers[:len(argvs)] if placement else []
    if workers and workers[0].namespace:
        argv = [*workers[0].command_prefix, HYDRA, "-launcher", "ssh", "-launcher-exec", IN_NAMESPACE,
                "-iface", workers[0].interface, "-hosts", ",".join(host.namespace for host in workers),
                *mpmd(one_rank_each(argvs))]
        quotas = quotas or {}
        argv = with_groups({host.namespace: quotas[i][1] for i, host in enumerate(workers) if i in quotas}) + argv
        return group.start(name, argv, {**namespaces_env(workers[0].interface), **(env or {})}, role="mpiexec",
                           host=workers[0].name)
    return group.start(name, [GFORKER, *mpmd(one_rank_each(argvs))], {**LOOPBACK_ENV, **(env or {})},
                       role="mpiexec")


SHARED_MEMORY = "/dev/shm"
SEGMENT_PREFIX = "mpich_shm_"  # the ranks of one node share a segment named so; MPI_Finalize removes it


def shared_memory_segments():
    try:
        return {name for name in os.listdir(SHARED_MEMORY) if name.startswith(SEGMENT_PREFIX)}
    except OSError:
        return set()


def remove_orphaned_segments(before):
    """Remove the MPICH segments that appeared since `before` (a shared_memory_segments() taken before the job) and
    that no process maps any more: ranks killed before MPI_Finalize leave them behind. The names removed."""
    appeared = shared_memory_segments() - before
    orphans = appeared - _mapped_segments() if appeared else set()  # reading every process's maps costs 0.4 s
    for name in orphans:
        try:
            os.unlink(os.path.join(SHARED_MEMORY, name))
        except FileNotFoundError:
            pass
    return orphans


def _mapped_segments():
    mapped = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                mapped.update(line.rsplit("/", 1)[-1].split()[0] for line in maps
                              if f"{SHARED_MEMORY}/{SEGMENT_PREFIX}" in line)
        except OSError:
            continue
    return mapped
