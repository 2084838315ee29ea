"""Emulated devices of fixed capacity: a worker under a CPU quota of its own (root and a cgroup CPU controller; the
tests that give real quotas skip without them)."""
import glob
import os
import subprocess
import sys
import time

import pytest

from launcher import experiment, workers
from launcher.cluster import ROOT
from tests.jobs import LENET_ARGS
from tests.test_launch import LENET, kill_once_training, launcher, read_output, recorded_pids, still_running, \
    training_started, wait_for
from training import runlog
from training.devices import cpu_quota
from training.checks import UsageError


def quotas_available():
    try:
        cpu_quota.controller()
        return True
    except cpu_quota.QuotaUnavailable:
        return False


needs_quotas = pytest.mark.skipif(not quotas_available(), reason="CPU quotas need root and a cgroup CPU controller")


@pytest.fixture
def quota_workers(tmp_path):
    """start(name, share) -> a lenet worker training alone under `share` of a core, in a group of this test's own
    tag; every worker is killed and every group of the tag removed when the test ends, pass or fail."""
    tag = f"test{os.getpid()}x{os.urandom(2).hex()}"
    started = []

    def start(name, share, steps=100_000, max_time=8):
        worker = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"), "-m", "local", *LENET_ARGS,
                                   "--max-iters", str(steps), "--max-time", str(max_time), "-e", "0",
                                   "--device-share", str(share), "-ld", str(tmp_path / name), "--node-name", "node"],
                                  cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", cpu_quota.TAG_VARIABLE: tag},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()
            worker.wait()
        cpu_quota.remove_groups(tag, keep_alive=False)
        assert cpu_quota.controller().groups(tag) == []


# ----------------------------------------------------------------------------------------------
# The quota's size, the period, the launcher's default


@pytest.mark.parametrize("cores, period", [(1.0, 1000), (2.0, 1000), (0.5, 2000), (0.366, 2733), (0.01, 100_000)])
def test_the_period_is_the_shortest_whose_quota_the_kernel_accepts(cores, period):
    assert cpu_quota.period_for(cores) == period
    assert cores * period >= cpu_quota.MIN_QUOTA_US - 1e-6


@pytest.mark.parametrize("slowdowns, cores, share", [((1, 1, 4), 2, 0.667), ((1, 1, 1, 1, 20, 20), 2, 0.366),
                                                      ((1, 2), 2, 1.0), ((1, 1, 4), 4, 1.0)])
def test_the_default_share_fits_every_quota_beside_what_the_launcher_keeps_free(slowdowns, cores, share):
    found = workers.default_device_share(slowdowns, cores)

    assert found == pytest.approx(share, abs=1e-3)
    assert sum(found / f for f in slowdowns) <= cores - workers.RESERVED_CORES + 1e-3


def test_without_a_cpu_controller_the_launcher_says_so_and_slow_devices_sleep(monkeypatch):
    def unavailable():
        raise cpu_quota.QuotaUnavailable("cannot create a cgroup under /sys/fs/cgroup/cpu (root only)")
    monkeypatch.setattr(cpu_quota, "controller", unavailable)

    run = experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5"])

    assert run.cluster.device_share is None
    assert run.cluster.devices_described == ("slow devices sleep after each step (no CPU quotas: cannot create a "
                                             "cgroup under /sys/fs/cgroup/cpu (root only))")
    with pytest.raises(UsageError, match="--device-share needs a CPU quota: cannot create"):
        experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", "--device-share", "0.5"])


@pytest.mark.parametrize("share", ["0", "-1", "1000"])
def test_a_share_that_is_no_share_of_the_cores_is_one_line_and_exit_2(tmp_path, share):
    launch = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), "--modes", "sync", "--slowdown", "1,4",
                             "--max-time", "5", "--device-share", share, "-ld", str(tmp_path / "logs")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    main = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), "-m", "local", *LENET_ARGS,
                           "--max-iters", "5", "--device-share", share, "-ld", str(tmp_path / "logs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)

    for result in (launch, main):
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "--device-share" in result.stderr
    assert not os.path.exists(tmp_path / "logs")


# ----------------------------------------------------------------------------------------------
# Real quotas


def cpu_seconds(pid):
    """The CPU time a process has used (user and system), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def logged_steps(tmp_path, name):
    return len(glob.glob(str(tmp_path / name / "node" / "*" / "iter-*.txt")))


def logged_seconds(tmp_path, name):
    """(the worker's training seconds, the seconds of its computing phases) over the rounds it has logged."""
    records = [runlog.read_round(path) for path in glob.glob(str(tmp_path / name / "node" / "*" / "iter-*.txt"))]
    records = [r for r in records if r is not None]
    return (max((r["total_time"] for r in records), default=0.0),
            sum(runlog.phase_seconds(r, runlog.OWN_STEP_PHASES) for r in records))


def cpu_used_while_training(tmp_path, workers, seconds=3):
    """{name: (the share of a core each worker used over `seconds` once every one of them trains, the steps it
    logged meanwhile, the share of its training time it spent computing, under its quota)}."""
    wait_for(lambda: all(logged_steps(tmp_path, name) >= 5 for name in workers), 90, "steps under the quotas")
    before = {name: (cpu_seconds(w.pid), logged_steps(tmp_path, name), logged_seconds(tmp_path, name))
              for name, w in workers.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    used = {}
    for name, w in workers.items():
        (training, computing), (was_training, was_computing) = logged_seconds(tmp_path, name), before[name][2]
        used[name] = ((cpu_seconds(w.pid) - before[name][0]) / elapsed, logged_steps(tmp_path, name) - before[name][1],
                      (computing - was_computing) / (training - was_training))
    return used


# What the kernel guarantees whatever else runs: while a worker computes, its CPU time grows by at most its quota's
# share of the time that passes (a busy machine only lowers it); between its computing phases (its run log, the loop)
# it may take a whole core. A clock tick of slack in the reading.
def at_most(share, computing=1.0):
    return (share * computing + (1.0 - computing)) * 1.1 + 2 / os.sysconf("SC_CLK_TCK")


@needs_quotas
@pytest.mark.slow
def test_two_devices_computing_at_once_each_get_their_own_quota_and_no_more(tmp_path, quota_workers):
    # At most a quarter of a core each, so each step lasts at least 4 times the CPU it uses; and quotas do not compete
    # while they fit the cores: each device gets its quarter beside the other (0.22-0.25 measured with two to three
    # busy loops beside them; 0.20 with six, which oversubscribe the cores). Their step times side by side with one
    # device alone are the benchmark's (bench/sections/devices.py).
    used = cpu_used_while_training(tmp_path, {name: quota_workers(name, 0.25) for name in ("first", "second")})

    for name, (share, steps, computing) in used.items():
        assert steps > 0 and 0.75 * 0.25 * computing <= share <= at_most(0.25, computing), (name, share, computing)


def devices_of(logs, mode):
    """(emulation, device share, slowdown) of each worker of a lenet run's mode, as its meta.json recorded them."""
    metas = [runlog.read_meta(f) for _, _, f in runlog.device_folders(os.path.join(logs, "lenet", mode))]
    return sorted((m["emulation"], m["device_share"], m["slowdown"]) for m in metas)


def quota_periods(group):
    """The periods in which a process ran under the group's quota, as the kernel counts them (0 once it is gone)."""
    try:
        with open(os.path.join(group, "cpu.stat")) as f:
            return int(dict(line.split() for line in f)["nr_periods"])
    except OSError:
        return 0


def computing_in_each(groups, timeout=60):
    """Wait until a process has computed under each group's quota since now; then each group's members."""
    before = {group: quota_periods(group) for group in groups}
    wait_for(lambda: all(quota_periods(g) > before[g] for g in groups), timeout, "each worker computing in its group")
    return {group: open(os.path.join(group, "cgroup.procs")).read().split() for group in groups}


def launcher_groups(proc):
    from launcher.runner import DEVICE_GROUP_PREFIX

    return cpu_quota.controller().groups(f"{DEVICE_GROUP_PREFIX}{proc.pid}")


def ended_launchers_groups():
    from launcher.runner import DEVICE_GROUP_PREFIX

    return [tag for tag in launcher_tags() if not os.path.exists(f"/proc/{tag[len(DEVICE_GROUP_PREFIX):]}")]


def launcher_tags():
    """The launcher runs that hold cgroups now (the tag of each group)."""
    from launcher.runner import DEVICE_GROUP_PREFIX

    tags = (os.path.basename(g).split("-", 1)[0] for g in cpu_quota.controller().groups())
    return [tag for tag in tags if tag.startswith(DEVICE_GROUP_PREFIX)]


@needs_quotas
@pytest.mark.slow
@pytest.mark.beside_others
def test_every_worker_of_a_run_trains_under_its_quota_and_the_groups_are_gone_when_it_ends(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync,local", "--slowdown", "1,4", "--max-time", "2", "--device-share", "0.5", "--no-figures",
            *LENET]
    with launcher(args, logs) as proc:
        wait_for(lambda: training_started(logs, "sync", 2), 90, "iteration logs")
        during = launcher_groups(proc)
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    assert len(during) == 2 and launcher_groups(proc) == []
    assert sorted(devices_of(logs, "sync") + devices_of(logs, "local")) == [
        ("cpu-quota", 0.5, 1.0), ("cpu-quota", 0.5, 1.0), ("cpu-quota", 0.5, 4.0)]
    assert "devices: CPU quotas: a fast device 0.5 of a core" in output


@needs_quotas
@pytest.mark.slow
def test_mpi_ranks_on_loopback_train_each_in_a_quota_group_of_its_own_which_is_gone_when_the_run_ends(tmp_path):
    logs = str(tmp_path / "logs")
    # 4 s of training: the ranks are still inside their groups when the test looks, whatever the machine's load
    args = ["--modes", "sync", "--collective", "ring", "--slowdown", "1,4", "--max-time", "4", "--device-share", "0.5",
            "--no-figures", *LENET]
    with launcher(args, logs) as proc:
        wait_for(lambda: training_started(logs, "sync", 2), 90, "iteration logs")
        groups = [group for group in launcher_groups(proc) if cpu_quota.pid_of(group) is not None]
        members = computing_in_each(groups)
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    assert len(groups) == 2 and all(set(procs) <= {str(cpu_quota.pid_of(group))}
                                    for group, procs in members.items()), members
    assert launcher_groups(proc) == []
    assert devices_of(logs, "sync") == [("cpu-quota", 0.5, 1.0), ("cpu-quota", 0.5, 4.0)]


def test_a_worker_the_launcher_started_enters_its_group_for_each_computing_phase_and_leaves_it_after(tmp_path,
                                                                                                      monkeypatch):
    # Files stand in for the two cgroup.procs launcher/in-cgroup opens: the group's and the root's.
    group, root = (open(tmp_path / name, "w+") for name in ("group.procs", "root.procs"))
    monkeypatch.setenv(cpu_quota.PROCS_FD_VARIABLE, str(group.fileno()))
    monkeypatch.setenv(cpu_quota.LEAVE_FD_VARIABLE, str(root.fileno()))
    device = cpu_quota.DeviceQuota(0.25)

    for _ in range(2):
        with device.computing():
            inside = device.inside
    device.close()
    device.close()  # out once only: the loop's last phase has left, main.py closes again on its way out

    pid = f"{os.getpid()}\n"
    assert inside and not device.inside
    assert cpu_quota.usage_in(f"x\n{device.usage.describe()}\n")[0] == device.usage.phases == 2
    assert open(tmp_path / "group.procs").read() == 2 * pid and open(tmp_path / "root.procs").read() == 2 * pid


def test_a_process_is_handed_the_group_opened_for_its_key_with_the_root_groups_to_leave_by():
    env = {cpu_quota.GROUP_FDS_VARIABLE: " 0=11 1=12", cpu_quota.LEAVE_FD_VARIABLE: "10", "OTHER": "kept"}

    first, first_fds = cpu_quota.handed_group(0, env)
    second, second_fds = cpu_quota.handed_group(1, env)
    unknown, unknown_fds = cpu_quota.handed_group(2, env)

    assert (first[cpu_quota.PROCS_FD_VARIABLE], first_fds) == ("11", (11, 10))
    assert (second[cpu_quota.PROCS_FD_VARIABLE], second_fds) == ("12", (12, 10))
    assert unknown == env and unknown_fds == () and first["OTHER"] == "kept"


@needs_quotas
@pytest.mark.slow
@pytest.mark.beside_others
def test_a_device_forty_times_slower_leaves_its_quota_when_training_ends_so_the_job_ends_at_once(tmp_path):
    # At 1/80 of a core a worker's teardown (its final weights, leaving the ps-lite job, exiting) would take about a
    # minute, and the launcher ends a job whose workers outlive the scheduler by 20 s as failed.
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync", "--slowdown", "1,40", "--max-time", "3", "--device-share", "0.5", "--no-figures",
            *LENET]
    with launcher(args, logs) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    assert "finished" in output and launcher_groups(proc) == []


@needs_quotas
@pytest.mark.slow
@pytest.mark.beside_others
def test_the_groups_of_a_failed_run_are_gone_too(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync", "--slowdown", "1,1", "--max-time", "120", *LENET]
    code, _, output = kill_once_training(args, logs, "worker-1")

    # groups of launchers that have ended, this one's among them (those of tests running beside it are alive)
    assert code == 1, output
    assert ended_launchers_groups() == [] and still_running(recorded_pids(logs)) == []


@needs_quotas
def test_the_groups_a_killed_launcher_left_are_removed_by_the_next_one():
    from launcher.runner import DEVICE_GROUP_PREFIX

    found = cpu_quota.controller()
    with open("/proc/sys/kernel/pid_max") as f:
        dead = int(f.read()) + 1  # no process has this PID
    orphan = found.create(f"{DEVICE_GROUP_PREFIX}{dead}-w0", 0.5)
    mine = found.create(f"{DEVICE_GROUP_PREFIX}{os.getpid()}-w0", 0.5)
    try:
        cpu_quota.remove_orphans(DEVICE_GROUP_PREFIX, found)

        assert not os.path.exists(orphan) and os.path.exists(mine)
    finally:
        for group in (orphan, mine):
            if os.path.exists(group):
                os.rmdir(group)
