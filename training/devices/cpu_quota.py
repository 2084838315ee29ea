"""Emulated devices of fixed capacity: a worker in a cgroup of its own whose CPU quota is its device's share of the
cores, as a shaped link has a rate (--device-share S: a worker with --slowdown F gets S / F of a core).

A device emulated by sleeping (--slowdown alone) computes as fast as the cores let it, which depends on how many other
processes compute at the same moment; under a quota its speed is fixed whatever runs beside it, as long as the quotas
fit the cores. The kernel's CPU controller enforces the quota: cgroup v1's cpu.cfs_quota_us / cpu.cfs_period_us
(mounted at /sys/fs/cgroup/cpu) or cgroup v2's cpu.max. The period is the shortest whose quota the kernel accepts,
1 ms of CPU (period_for): a short period keeps a step's time smooth, and a device that waited (an SSGD worker waiting
for the slowest) can burst through at most one period's quota before the quota holds it. Measured on lenet (300
steps, coefficient of variation of a step): at 0.37 of a core 1.06 with the kernel's default 100 ms, 0.30 at 20 ms,
0.19-0.23 at 10 ms, 0.14-0.16 at 5 ms, 0.13 at 2.7 ms (this rule); at 0.67 of a core 0.17 at 5 ms, 0.10 at 1.5 ms.
With 5 ms periods on 1,1,1,1,20,20 the fast workers' forward and backward took 16.0 ms under SSGD, whose workers
wait, and 19.5 ms under ESync, whose workers compute throughout.

A worker is inside its group only while it computes (DeviceQuota.computing: each local step's batch, forward and
backward pass and local update): its pushes and pulls, the state server's requests, snapshots, its start-up and its
teardown run outside, at the link's and the machine's speed, as a device slow at computing still has a network card
as fast as the others'. By hand it makes its own group, <controller>/esync/<tag>-<pid> (tag: $ESYNC_DEVICE_GROUP, or
"hand"), and removes it when it exits; a group a killed process left behind is removed by the next worker of the
same tag that starts. The
launcher makes each worker's group itself, esync/launch<pid>-w<index>, and starts the worker with that group's
cgroup.procs open as file descriptor $ESYNC_CGROUP_FD, and the root group's as $ESYNC_CGROUP_LEAVE_FD
(launcher/in-cgroup: under `ip netns exec` the worker no longer sees the cgroups); it removes the groups when the run
ends. Needs root (or a delegated cgroup).
"""
import contextlib
import logging
import os
import re
import time

log = logging.getLogger("cpu_quota")

V1_ROOT = "/sys/fs/cgroup/cpu"
V2_ROOT = "/sys/fs/cgroup"
PARENT = "esync"
MIN_QUOTA_US = 1000   # the kernel's smallest quota
MIN_PERIOD_US = 1000  # and period
TAG_VARIABLE = "ESYNC_DEVICE_GROUP"
HAND_TAG = "hand"
USAGE_PREFIX = "device CPU:"  # the line a worker logs at its end (CpuUsage)


class QuotaUnavailable(Exception):
    """This machine or user cannot give a process a CPU quota; the message says why."""


class Controller:
    """The CPU controller of one cgroup hierarchy: v1 (cpu.cfs_*) or v2 (cpu.max)."""

    def __init__(self, root, version):
        self.root, self.version = root, version

    @property
    def parent(self):
        return os.path.join(self.root, PARENT)

    def describe(self):
        return f"cgroup v{self.version} CPU controller at {self.root}, periods of 1 ms of quota"

    def create(self, name, cores):
        """A group under esync/ limited to `cores` CPUs; its path."""
        os.makedirs(self.parent, exist_ok=True)
        if self.version == 2:
            enable_cpu_controller(self.root, self.parent)
        path = os.path.join(self.parent, name)
        os.makedirs(path, exist_ok=True)
        period = period_for(cores)
        quota = int(round(cores * period))
        if self.version == 1:
            write(os.path.join(path, "cpu.cfs_period_us"), period)
            write(os.path.join(path, "cpu.cfs_quota_us"), quota)
        else:
            write(os.path.join(path, "cpu.max"), f"{quota} {period}")
        return path

    def groups(self, tag=None):
        """Paths of the groups of `tag` (of every tag with None) under esync/."""
        if not os.path.isdir(self.parent):
            return []
        return [os.path.join(self.parent, name) for name in sorted(os.listdir(self.parent))
                if (tag is None or name.startswith(f"{tag}-")) and os.path.isdir(os.path.join(self.parent, name))]


def period_for(cores):
    """The shortest period in which `cores` CPUs make a quota the kernel accepts."""
    return max(MIN_PERIOD_US, int(-(-MIN_QUOTA_US // cores)))


def write(path, value):
    with open(path, "w") as f:
        f.write(f"{value}\n")


def enable_cpu_controller(root, parent):
    for folder in (root, parent):
        with open(os.path.join(folder, "cgroup.subtree_control"), "w") as f:
            f.write("+cpu\n")


def controller():
    """The CPU controller this process can use; QuotaUnavailable (one line) otherwise."""
    if os.path.isfile(os.path.join(V1_ROOT, "cpu.cfs_quota_us")):
        found = Controller(V1_ROOT, 1)
    elif "cpu" in read_words(os.path.join(V2_ROOT, "cgroup.controllers")):
        found = Controller(V2_ROOT, 2)
    else:
        raise QuotaUnavailable(f"no cgroup CPU controller ({V1_ROOT}/cpu.cfs_quota_us or cpu in "
                               f"{V2_ROOT}/cgroup.controllers)")
    if not os.access(found.root, os.W_OK):
        raise QuotaUnavailable(f"cannot create a cgroup under {found.root} (root only)")
    return found


def read_words(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def pid_of(group):
    """The PID a group's name ends with (<tag>-<pid>), or None."""
    suffix = os.path.basename(group).rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else None


def remove_orphans(prefix, found):
    """Remove the groups of launchers that are gone (`prefix`<launcher pid>-...): a launcher killed outright left them;
    the number removed."""
    removed = 0
    for group in found.groups():
        tag = os.path.basename(group).split("-", 1)[0]
        pid = tag[len(prefix):]
        if tag.startswith(prefix) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            removed += remove_groups(tag, found, keep_alive=False)
    return removed


def remove_groups(tag, found=None, keep_alive=True):
    """Remove the groups of `tag` (with keep_alive, only those whose process is gone); the number removed."""
    found = found or controller()
    removed = 0
    for group in found.groups(tag):
        pid = pid_of(group)
        if keep_alive and pid is not None and os.path.exists(f"/proc/{pid}"):
            continue
        try:
            os.rmdir(group)
            removed += 1
        except OSError as err:  # a process still in it: the caller stops it first
            log.warning("could not remove %s: %s", group, err.strerror or err)
    return removed


PROCS_FD_VARIABLE = "ESYNC_CGROUP_FD"
LEAVE_FD_VARIABLE = "ESYNC_CGROUP_LEAVE_FD"  # the root group's cgroup.procs, which the worker leaves its quota by
GROUP_FDS_VARIABLE = "ESYNC_GROUP_FDS"       # "KEY=FD ...": the workers' cgroup.procs launcher/with-groups opened


def opened_by_launcher():
    """Whether the launcher opened this worker's group (or, for Hogwild!'s coordinator, its workers' groups)."""
    return launcher_fd() is not None or bool(os.environ.get(GROUP_FDS_VARIABLE, "").strip())


def handed_group(key, env):
    """(env, pass_fds) that hand a process started from here the group launcher/with-groups opened for worker `key`
    (a Hogwild! rank) as its $ESYNC_CGROUP_FD, with the root group's to leave it by; (env, ()) where none was."""
    for entry in env.get(GROUP_FDS_VARIABLE, "").split():
        name, _, fd = entry.partition("=")
        if name == str(key) and fd.isdigit():
            leave = env.get(LEAVE_FD_VARIABLE, "")
            return {**env, PROCS_FD_VARIABLE: fd}, tuple(int(x) for x in (fd, leave) if x.isdigit())
    return env, ()


def launcher_fd(variable=PROCS_FD_VARIABLE):
    """The file descriptor of the cgroup.procs the launcher opened for this worker, or None."""
    value = os.environ.get(variable, "")
    return int(value) if value.isdigit() else None


class DeviceQuota:
    """This process's device: `cores` CPUs while it computes (computing()), in the group the launcher made for it or
    in a group of its own, made here. Between its computing phases the process is outside the quota: a device slow
    at computing talks at its link's speed, as a CPU beside GPUs has as fast a network card as they."""

    def __init__(self, cores, tag=None, found=None):
        self.cores = cores
        self.controller = self.group = None
        self.fd, self.leave_fd = launcher_fd(), launcher_fd(LEAVE_FD_VARIABLE)
        if self.fd is None:
            self.controller = found or controller()
            self.tag = tag or os.environ.get(TAG_VARIABLE) or HAND_TAG
            remove_groups(self.tag, self.controller)  # what killed workers of this tag left
            self.group = self.controller.create(f"{self.tag}-{os.getpid()}", cores)
            self.fd = os.open(os.path.join(self.group, "cgroup.procs"), os.O_WRONLY)
            self.leave_fd = os.open(os.path.join(self.controller.root, "cgroup.procs"), os.O_WRONLY)
        self.pid = f"{os.getpid()}\n".encode()
        self.inside = False
        self.usage = CpuUsage()

    def describe(self):
        where = "the launcher's group" if self.group is None else f"{self.controller.describe()}, group {self.group}"
        return f"{self.cores:.3g} of a core while computing ({where})"

    def enter(self):
        os.write(self.fd, self.pid)  # every thread of the process: MXNet's engine and OpenMP threads compute
        self.inside = True
        self.usage.entered()

    def leave(self):
        """Out of the quota, into the root group: what the worker does between its computing phases (pushing,
        pulling, asking the state server, snapshots) and after its training is no part of the device's computing."""
        if self.inside:
            self.usage.left()
            if self.leave_fd is not None:
                os.write(self.leave_fd, self.pid)
        self.inside = False

    @contextlib.contextmanager
    def computing(self):
        """One computing phase under the quota: one write to cgroup.procs in, one out (0.03 ms the two, here)."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def close(self):
        """Out of the quota for good, with a line of what the device computed; a group made here is removed (once)."""
        self.leave()
        if self.usage.phases and not self.usage.reported:
            log.info("%s", self.usage.describe())
            self.usage.reported = True
        if self.group is None:
            return
        for fd in (self.fd, self.leave_fd):
            os.close(fd)
        try:
            os.rmdir(self.group)
        except OSError as err:
            log.warning("could not remove %s: %s", self.group, err.strerror or err)
        self.group = None


class CpuUsage:
    """The process's CPU time inside its computing phases (under the quota) and between them, from the first phase's
    start to the last one's end: what the device computed, and what escaped its quota. Two reads of the process's
    CPU clock a phase (about a microsecond each, beside the two writes to cgroup.procs)."""

    def __init__(self):
        self.phases = 0
        self.inside = 0.0
        self.first = self.last = self.started = None
        self.reported = False

    def entered(self):
        self.started = time.process_time()
        if self.first is None:
            self.first = self.started

    def left(self):
        self.last = time.process_time()
        self.inside += self.last - self.started
        self.phases += 1

    @property
    def outside(self):
        """CPU seconds between the computing phases (all threads), from the first phase to the last."""
        return max(0.0, self.last - self.first - self.inside) if self.phases else 0.0

    def describe(self):
        return (f"{USAGE_PREFIX} {self.phases} computing phases, {self.inside:.3f} s of CPU under the quota, "
                f"{self.outside:.3f} s between them ({1000 * self.outside / self.phases:.3f} ms a phase)")


def usage_in(output):
    """(phases, CPU seconds under the quota, CPU seconds between the phases) from the last such line of a worker's
    output, or None."""
    found = re.findall(rf"{re.escape(USAGE_PREFIX)} (\d+) computing phases, ([0-9.]+) s of CPU under the quota, "
                       r"([0-9.]+) s between them", output)
    return (int(found[-1][0]), float(found[-1][1]), float(found[-1][2])) if found else None
