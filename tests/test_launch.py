"""launch.py and the launcher package: a whole comparison run, a worker dying, an interrupt, bad input, and the dmlc_tracker path.

Every launcher runs in its own process group; when a test ends, pass or fail, whatever the launcher or the
processes recorded in its pids.json left behind is killed by PID.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from launcher import cluster, commands, dmlc, experiment
from launcher.cluster import ROOT, ProcessGroup, free_port, is_running, processes_in_group
from launcher.supervision import ExitWatch
from training.checks import UsageError

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others

LAUNCH_PY = os.path.join(ROOT, "launch.py")
NODE = "node"
LENET = ["-n", "lenet", "--dataset", "mnist-5k", "-dd", os.path.join(ROOT, "data"), "--node-name", NODE]
STARTUP_TIMEOUT = 90.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def launcher_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("DMLC_") and k != "PORT"}


@contextmanager
def launcher(args, logs, env=None, subprogram=()):
    """A running launch.py [subprogram] with output in <logs>.out; on the way out, nothing it started is left
    running."""
    output = logs + ".out"
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, LAUNCH_PY, *subprogram, "--logs", logs] + args, cwd=ROOT,
                                env=env or launcher_env(),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.output = output
    try:
        yield proc
    finally:
        kill_group(proc.pid)
        proc.wait()
        for pid in recorded_pids(logs):
            kill_group(pid)


def kill_group(pgid):
    for pid in processes_in_group(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def recorded_pids(logs):
    """PIDs of every process the launcher recorded in a pids.json under `logs`."""
    pids = []
    for path in glob.glob(os.path.join(logs, "**", experiment.PROCESSES_FOLDER, experiment.PID_FILE), recursive=True):
        with open(path) as f:
            pids += [p["pid"] for p in json.load(f)["processes"]]
    return pids


def run_launcher(args, logs, timeout):
    with launcher(args, logs) as proc:
        proc.wait(timeout=timeout)
        with open(proc.output) as f:
            return proc.returncode, f.read()


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)


def training_started(logs, mode, num_workers):
    """True once every worker has logged a few global iterations."""
    return len(glob.glob(os.path.join(logs, "lenet", mode, NODE, "*-worker*", "iter-3.txt"))) == num_workers


def pid_of(logs, mode, name):
    with open(os.path.join(logs, "lenet", mode, experiment.PROCESSES_FOLDER, experiment.PID_FILE)) as f:
        return next(p["pid"] for p in json.load(f)["processes"] if p["name"] == name)


def still_running(pids):
    return [pid for pid in pids if is_running(pid)]


def read_output(proc):
    with open(proc.output) as f:
        return f.read()


def kill_once_training(args, logs, name, startup=STARTUP_TIMEOUT):
    """Run the launcher on `args` (a sync job), SIGKILL its process `name` once both workers train; (the launcher's
    exit code, the PID killed, the launcher's output)."""
    with launcher(args, logs) as proc:
        wait_for(lambda: training_started(logs, "sync", 2), startup, "iteration logs")
        victim = pid_of(logs, "sync", name)
        os.kill(victim, signal.SIGKILL)
        proc.wait(timeout=30)
        return proc.returncode, victim, read_output(proc)


# ----------------------------------------------------------------------------------------------
# Output (a whole comparison run with its progress, table and process outputs: tests/test_paper.py)


def table_rows(output):
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("mode ") and "samples/s" in line)
    rows = []
    for line in lines[header + 1:]:
        if not line.strip() or line.startswith("summaries:"):
            break
        rows.append(line.split())
    return rows


def assert_figures_drawn(logs, output, expected):
    figures = glob.glob(os.path.join(logs, "lenet", "figures", "*.png"))
    assert {os.path.basename(f) for f in figures} >= expected, output
    for figure in figures:
        with open(figure, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE, figure
        assert figure in output


# ----------------------------------------------------------------------------------------------
# Failures and interrupts


@pytest.mark.slow
def test_free_ports_are_never_handed_out_twice_by_one_process():
    # Two jobs started in a row once got the same scheduler port: the kernel offered it again before either bound it.
    ports = [free_port() for _ in range(300)]

    assert len(set(ports)) == len(ports)
    # and none where the kernel hands out ports to whatever binds port 0 (ps-lite's servers and workers)
    ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert all(ephemeral - cluster.PORTS_BELOW_EPHEMERAL <= port < ephemeral for port in ports)


def test_two_jobs_in_one_process_group_keep_their_outputs_apart(tmp_path):
    with ProcessGroup(str(tmp_path)) as group:
        first, second = (group.start("worker-0", [sys.executable, "-c", f"print({n})"]) for n in (1, 2))
        assert group.wait([first, second], timeout=30)

    assert (first.name, second.name) == ("worker-0", "worker-0.2")
    assert [open(p.output).read() for p in (first, second)] == ["1\n", "2\n"]


def test_a_killed_worker_stops_the_run_and_is_named(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync", "--devices", "cpu,cpu", "--max-time", "120", *LENET]

    code, victim, output = kill_once_training(args, logs, "worker-1")

    assert code == 1, output
    assert f"worker-1 (worker, pid {victim}) exited with signal SIGKILL" in output
    assert os.path.join(logs, "lenet", "sync", "processes", "worker-1.log") in output
    assert pid_of(logs, "sync", "evaluator") in recorded_pids(logs)
    assert still_running(recorded_pids(logs)) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_stops_every_process(tmp_path, sig):
    logs = str(tmp_path / "logs")
    args = ["--modes", "esync", "--devices", "cpu,cpu", "--max-time", "120", *LENET]
    with launcher(args, logs) as proc:
        wait_for(lambda: training_started(logs, "esync", 2), STARTUP_TIMEOUT, "iteration logs")
        started = recorded_pids(logs)

        proc.send_signal(sig)
        proc.wait(timeout=30)

        assert proc.returncode == 130, read_output(proc)
        assert len(started) == 6  # state server, evaluator, scheduler, server, 2 workers
        assert still_running(started) == []


class FakeProc:
    def __init__(self, name, role, code, output):
        self.name, self.role, self.code, self.output = name, role, code, output

    def poll(self):
        return self.code


class FakeGroup:
    def __init__(self, *procs):
        self.procs = list(procs)


@pytest.mark.parametrize("last_line, quit_early", [
    ("worker INFO finished: 40 global iterations in 5.0 s (reached --max-time 5 s)", False),
    ("worker INFO iter 40  5.0 s", True),
])
def test_a_worker_exiting_0_must_have_reached_a_stop_condition(tmp_path, last_line, quit_early):
    output = tmp_path / "worker-0.log"
    output.write_text(last_line + "\n")
    watch = ExitWatch(FakeGroup(FakeProc("worker-0", "worker", 0, str(output)),
                                       FakeProc("worker-1", "worker", None, str(output))))

    watch.update()

    assert bool(watch.quitters) == quit_early


@pytest.mark.parametrize("args, message", [
    (["--devices", "cpu,cpu", "--slowdown", "1,1,4"], "--slowdown has 3 factors but --devices has 2 workers"),
    ([], "the following arguments are required: --devices"),
    (["--modes", "esync,fastest", "--devices", "cpu,cpu"], "unknown mode fastest"),
    (["--devices", "cpu,tpu0"], "'tpu0' is not cpu, cpuN, gpuK or gpuK+gpuL"),
    (["--devices", "cpu,cpu", "--slowdown", "0.5"], "must be >= 1"),
    (["--devices", "cpu,cpu", "-dd", "/nonexistent"], "mnist-5k not found"),
    (["--devices", "cpu,cpu", "--byzantine", "2"], "--byzantine 2: must leave at least one of the 2 workers honest"),
    (["--devices", "cpu,cpu", "--checkpoint-every", "-1"], "--max-restarts and --checkpoint-every must be 0 or more"),
    (["--modes", "zeno", "--devices", "cpu,cpu", "--tracker", "local"], "--modes zeno needs its validator process"),
    (["--devices", "cpu,cpu", "--hosts", "netns", "--bandwidth", "10MB"], "rate '10MB' is not like 1gbit"),
    (["--devices", "cpu,cpu", "--hosts", "netns", "--netns-subnet", "10.213.0.0/30"], "no room for 3 hosts"),
    (["--devices", "cpu,cpu", "--hosts", "netns", "--tracker", "local"], "leave out --tracker"),
    (["--modes", "esync,async", "--devices", "cpu,cpu", "--collective", "ring"],
     "--collective ring sums the updates of a synchronous mode; --modes async has no such aggregation"),
    (["--modes", "sync", "--devices", "cpu,cpu", "--collective", "butterfly", "--tracker", "local"],
     "--collective butterfly starts the workers under mpiexec: leave out --tracker"),
    (["--modes", "sync", "--devices", "cpu,cpu", "--collective", "ring", "-s", "2"],
     "-s 2: --collective ring has no servers"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    argv = [sys.executable, LAUNCH_PY, "-n", "lenet", "--dataset", "mnist-5k", "--max-time", "5",
            "--logs", str(tmp_path / "logs"), *args]

    result = subprocess.run(argv, cwd=ROOT, env=launcher_env(), capture_output=True, text=True, timeout=30)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not os.path.exists(tmp_path / "logs")


@pytest.mark.slow
def test_zeno_with_an_attacker_over_mpi_starts_a_validator_and_logs_to_an_attack_folder(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "zeno", "--devices", "cpu,cpu", "--byzantine", "1", "--max-iters", "20", "--collective", "ring",
            *LENET]

    code, output = run_launcher(args, logs, timeout=300)

    assert code == 0, output
    assert "no servers: MPI's ring allreduce" in output
    assert not still_running(recorded_pids(logs))
    assert processes_in_group(pid_of(logs, "zeno-attack", "mpiexec")) == []  # the ranks are mpiexec's group
    run = json.load(open(os.path.join(logs, "lenet", "zeno-attack", "Zeno-Attack.json")))
    assert run["attacked"] and run["byzantine_workers"] == 1 and run["num_workers"] == 2
    assert [v.split("/")[1].endswith("-validator") for v in run["validators"]] == [True]
    assert sorted(d["byzantine"] or "-" for d in run["devices"][NODE].values()) == ["-", "signflip"]
    assert [row[0] for row in table_rows(output)] == ["zeno-attack"], output
    assert_figures_drawn(logs, output, {"accuracy_vs_time.png", "throughput.png", "traffic.png"})


# ----------------------------------------------------------------------------------------------
# Through MXNet's dmlc_tracker


@pytest.mark.slow
@pytest.mark.beside_others(False)  # with the timed tests, to balance the two halves of the suite (tests/conftest.py)
def test_the_local_tracker_trains_a_two_worker_job_and_exits_cleanly(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--tracker", "local", "--modes", "sync", "--devices", "cpu,cpu", "--slowdown", "1,2",
            "--max-time", "2", *LENET]

    code, output = run_launcher(args, logs, timeout=120)

    assert code == 0, output
    assert "dmlc_tracker command:" in output
    tracker = pid_of(logs, "sync", "tracker")
    assert processes_in_group(tracker) == []
    metas = [json.load(open(p)) for p in glob.glob(os.path.join(logs, "lenet", "sync", NODE, "*", "meta.json"))]
    assert sorted(m["slowdown"] for m in metas) == [1.0, 2.0]  # each task got its own --devices entry
    assert json.load(open(os.path.join(logs, "lenet", "sync", "Sync.json")))["num_workers"] == 2


def test_the_mpi_tracker_passes_variables_to_mpich_5s_mpirun_as_it_takes_them():
    from dmlc_tracker import mpi

    dmlc.adapt_mpi_launcher()  # this test's process only: dmlc_tracker's module is patched in place

    assert mpi.get_mpi_env({"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1"}) == \
        " -env DMLC_ROLE worker -env DMLC_PS_ROOT_URI 127.0.0.1"


def test_the_tracker_gets_every_worker_argument_in_order():
    from dmlc_tracker import opts

    described = experiment.parse(["--tracker", "local", "--modes", "sync", "--devices", "cpu,gpu0+gpu1",
                                  "--max-time", "5", *LENET, "--", "-b", "32"])
    argv = commands.tracker_argv(described, "sync", "/logs dir/lenet/sync")

    dmlc = opts.get_opts(argv[2:])

    assert (dmlc.cluster, dmlc.num_workers, dmlc.num_servers, dmlc.host_ip) == ("local", 2, 1, "127.0.0.1")
    command = " ".join(dmlc.command)
    assert "task --devices cpu,gpu0+gpu1 --slowdown 1,1 -- -m sync" in command
    assert "-ld '/logs dir/lenet/sync'" in command and command.endswith("-b 32")


@pytest.mark.parametrize("device, flags", [
    ("cpu", ["-c", "1"]), ("cpu2", ["-c", "2"]), ("gpu1", ["-g", "1"]), ("gpu0+gpu1", ["-g", "0,1"]),
])
def test_devices_map_to_main_flags(device, flags):
    assert commands.device_flags(device) == flags


def test_a_task_picks_its_device_by_task_index(monkeypatch):
    monkeypatch.setenv("DMLC_TASK_ID", "1")

    assert dmlc.task_index(["cpu", "gpu0"], ["1", "4"]) == 1


def test_without_a_task_index_workers_must_be_identical(monkeypatch):
    for name in dmlc.TASK_INDEX_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    assert dmlc.task_index(["gpu0", "gpu0"], ["2", "2"]) is None
    with pytest.raises(UsageError):
        dmlc.task_index(["cpu", "gpu0"], ["1", "1"])


@pytest.mark.parametrize("worker_args, expected", [
    (["-b", "32", "--sync-timeout", "20"], ["--sync-timeout", "20"]),
    (["--sync-timeout=20", "-b", "32"], ["--sync-timeout=20"]),
    (["-b", "32"], []),
])
def test_the_scheduler_and_servers_get_the_workers_sync_timeout(worker_args, expected):
    assert commands.sync_timeout_args(worker_args) == expected
