"""Jobs on a virtual clock (training/clocks/): the scheduler's order and invariants, the links' charges, and real
launcher runs whose logs are the same whatever else the machine does."""
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from analysis import summary
from launcher import experiment
from tests.test_launch import launcher, launcher_env, read_output
from training import modes, runlog
from training.checks import UsageError
from training.clocks import job, network, virtual
from training.clocks.scheduler import Scheduler, VirtualJobFailed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH_PY = os.path.join(ROOT, "launch.py")


# ----------------------------------------------------------------------------------------------
# The scheduler and the models


def test_the_earliest_worker_runs_first_and_equal_times_go_to_the_lowest_rank():
    scheduler, ran = Scheduler(3), []

    def body(rank, steps):
        def run():
            for step in steps:
                ran.append((scheduler.now(rank), rank))
                scheduler.advance(rank, step)
        return run

    scheduler.run([body(0, [1.0, 1.0]), body(1, [0.5, 2.0]), body(2, [1.0])])

    assert ran == [(0.0, 0), (0.0, 1), (0.0, 2), (0.5, 1), (1.0, 0)]
    assert scheduler.times == [2.0, 2.5, 1.0]


def test_a_collective_ends_for_everyone_after_the_last_arrival_and_hands_each_its_result():
    scheduler, results = Scheduler(2), {}

    def body(rank, before):
        def run():
            scheduler.advance(rank, before)
            results[rank] = scheduler.meet(rank, rank + 10, lambda given, arrivals: (
                sum(given.values()), {r: max(arrivals.values()) + 0.25 for r in arrivals}))
        return run

    scheduler.run([body(0, 1.0), body(1, 3.0)])

    assert results == {0: 21, 1: 21} and scheduler.times == [3.25, 3.25]


def test_a_worker_left_waiting_on_a_collective_fails_the_job_in_one_line_instead_of_hanging():
    scheduler = Scheduler(2)
    done = threading.Event()

    def waits():
        scheduler.meet(0, None, lambda given, arrivals: (None, arrivals))

    with pytest.raises(VirtualJobFailed, match="wait on a collective operation that the others left"):
        scheduler.run([waits, done.set])
    assert done.is_set()


def test_a_negative_charge_is_refused():
    scheduler = Scheduler(1)

    with pytest.raises(VirtualJobFailed, match="a charge is never negative"):
        scheduler.run([lambda: scheduler.advance(0, -1.0)])


def test_a_step_is_charged_its_devices_seconds_and_the_jitter_has_mean_one():
    import random

    device = virtual.Device(step_seconds=0.03, slowdown=117, batch_size=64)
    jittered = virtual.Device(step_seconds=1.0, slowdown=1, batch_size=64, jitter=0.3)
    rng = random.Random(0)

    assert device.seconds(64, rng) == pytest.approx(3.51) and device.seconds(32, rng) == pytest.approx(1.755)
    draws = [jittered.seconds(64, rng) for _ in range(20000)]
    assert sum(draws) / len(draws) == pytest.approx(1.0, abs=0.01) and min(draws) != max(draws)


def test_the_servers_apply_a_push_when_it_lands_and_a_pull_reads_what_landed_before_it():
    import mxnet as mx

    from training.transport.collectives import ByteCounter
    from training.transport.virtual_servers import VirtualKVStore, VirtualServers

    scheduler = Scheduler(2)
    one_float = network.Link(seconds_per_byte=0.001)  # one float32: 4 ms a transfer
    servers = VirtualServers(scheduler, network.Network.uniform(2, one_float))
    seen = {}

    def worker(rank):
        kv = VirtualKVStore(servers, rank, 2, ByteCounter())
        kv.init(0, mx.nd.zeros((1,)))
        if rank == 0:
            kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
            kv.push(0, mx.nd.ones((1,)))  # lands at 4 ms
        out = mx.nd.zeros((1,))
        kv.pull(0, out=out)  # rank 0 after its push lands; rank 1 at once, before it lands
        seen[rank] = (float(out.asscalar()), round(scheduler.now(rank), 6))

    scheduler.run([lambda: worker(0), lambda: worker(1)])

    # rank 1 read at 0 and its download ended at 4 ms; rank 0 read the rule's update of its push at 4 ms, and its
    # download queued behind rank 1's
    assert seen == {0: (-0.5, 0.008), 1: (0.0, 0.004)} and servers.applied == 1


# ----------------------------------------------------------------------------------------------
# What the launcher refuses


@pytest.mark.parametrize("argv, message", [
    (["--modes", "sync"], "--clock virtual: give the devices' step time, --step-seconds S"),
    (["--modes", "esync", "--step-seconds", "0.01", "--esync-policy", "nonblocking"],
     "--clock virtual: esync --esync-policy nonblocking times requests in flight"),
    (["--modes", "backup", "--step-seconds", "0.01"], "--clock virtual: backup sums its steps on a thread of its own"),
    (["--modes", "sync", "--step-seconds", "0.01", "--", "--update-on-servers"], "sync --update-on-servers needs"),
    (["--modes", "hogwild", "--step-seconds", "0.01"], "racing in shared memory"),
    (["--modes", "sync", "--step-seconds", "0.01", "--hosts", "netns"], "leave out --hosts netns"),
    (["--modes", "fedavg", "--step-seconds", "0.01", "--", "--overlap"],
     "fedavg --overlap computes while its sum travels; the virtual clock charges a sum as blocking"),
    (["--modes", "sync", "--step-seconds", "0.01", "--ps-bandwidth", "fast"], "--ps-bandwidth: rate 'fast' is not"),
])
def test_what_the_virtual_clock_cannot_run_is_refused_in_one_line(argv, message):
    with pytest.raises(UsageError, match=message):
        experiment.parse(["--slowdown", "1,4", "--max-time", "5", "--clock", "virtual", *argv])


def test_a_refusal_is_one_line_and_exit_2_before_anything_starts(tmp_path):
    result = subprocess.run([sys.executable, LAUNCH_PY, "--modes", "sync", "--slowdown", "1,4", "--max-time", "5",
                             "--clock", "virtual", "-ld", str(tmp_path)], capture_output=True, text=True,
                            env=launcher_env(), timeout=60)

    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not os.listdir(tmp_path)


# ----------------------------------------------------------------------------------------------
# Real jobs


def virtual_args(modes, slowdown, *more):
    return ["--modes", modes, "-n", "lenet", "--dataset", "mnist-5k", "--slowdown", slowdown, "--max-time", "2",
            "--clock", "virtual", "--step-seconds", "0.007", "--step-jitter", "0.2", "--no-figures", *more]


def virtual_run(logs, modes, slowdown, *more):
    with launcher(virtual_args(modes, slowdown, *more), logs) as proc:
        proc.wait(timeout=300)
        return proc.returncode, read_output(proc)


def logged(logs):
    """{path under logs: bytes} of every iteration log, evaluation and final model of a run."""
    found = {}
    for path in sorted(glob.glob(os.path.join(logs, "lenet", "*", "*", "*", "*"))):
        if os.path.basename(path).startswith("iter-") or path.endswith(runlog.FINAL_MODEL_FILE):
            with open(path, "rb") as f:
                found[os.path.relpath(path, logs)] = f.read()
    return found


RUNS_VIRTUALLY = [mode for mode in modes.MODES if job.refusal(mode) is None]
EVERY_MODE = ("--max-time", "2", "--step-seconds", "0.1", "--snapshot-seconds", "1")  # 20 fast steps, 5 slow ones


@pytest.fixture(scope="module")
def virtual_jobs(tmp_path_factory):
    """Every mode that runs on the virtual clock, 2 virtual seconds on 3 devices; and at the same time ESync and ASGD
    again, each job the other's load (and the tests' beside them), the second on MXNet's threaded engine rather than
    the naive one a virtual job takes (training/clocks/job.py)."""
    runs = [str(tmp_path_factory.mktemp("virtual") / "logs") for _ in range(2)]
    args = [virtual_args(",".join(chosen), "1,1,4", *EVERY_MODE) for chosen in (RUNS_VIRTUALLY, ["esync", "async"])]
    threaded = {**launcher_env(), "MXNET_ENGINE_TYPE": "ThreadedEnginePerDevice"}
    with launcher(args[0], runs[0]) as every_mode, launcher(args[1], runs[1], threaded) as beside_it:
        for proc in (every_mode, beside_it):
            proc.wait(timeout=300)
            assert proc.returncode == 0, read_output(proc)
    return runs


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_a_job_on_the_virtual_clock_writes_the_same_logs_whatever_else_the_machine_runs_on_either_engine(
        virtual_jobs):
    every_mode, beside_busy_loops = (logged(logs) for logs in virtual_jobs)
    alone = {name: content for name, content in every_mode.items() if name.split(os.sep)[1] in ("esync", "async")}

    assert alone and alone.keys() == beside_busy_loops.keys()
    assert [name for name in alone if alone[name] != beside_busy_loops[name]] == []


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_every_mode_but_those_refused_runs_two_virtual_seconds_on_three_devices_and_summary_reads_it(virtual_jobs):
    assert set(modes.MODES) - set(RUNS_VIRTUALLY) == {"backup", "hogwild"}
    for mode in RUNS_VIRTUALLY:
        summarised = summary.summarize_mode(os.path.join(virtual_jobs[0], "lenet"), mode)
        assert summarised["clock"]["kind"] == runlog.VIRTUAL_CLOCK and summarised["elapsed_time"] >= 1.9, mode
        assert summarised["num_rounds"] > 0 and summarised["final_accuracy"] is not None, mode


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_its_times_are_the_charges_and_its_summary_says_the_clock(virtual_jobs):
    sync = summary.summarize_mode(os.path.join(virtual_jobs[0], "lenet"), "sync")

    assert sync["clock"]["kind"] == runlog.VIRTUAL_CLOCK and sync["clock"]["step_seconds"] == 0.1
    assert 1.95 <= sync["elapsed_time"] <= 2.6
    # a round waits for the slow device's step, 4 x 0.1 s (its jitter averages out): about 5 rounds in 2 s
    assert 3 <= sync["num_rounds"] <= 6
    steps = [r["time"]["0"]["forward and backward"]
             for r in runlog.DeviceLog(glob.glob(os.path.join(virtual_jobs[0], "lenet", "sync", "*",
                                                              "cpu-worker2"))[0]).ordered()]
    assert all(0.2 < step < 0.8 for step in steps)  # 0.4 s x a log-normal factor of spread 0.2


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_asgd_logs_its_staleness_and_the_slow_device_sees_the_most(virtual_jobs):
    run = summary.summarize_mode(os.path.join(virtual_jobs[0], "lenet"), "async")
    by_device = {name: statistics.median(stats["staleness_list"])
                 for name, stats in run["devices"][next(iter(run["devices"]))].items()}

    # while the slow device computes one step, each fast one pushes about 4
    assert by_device["cpu-worker2"] >= 6 and by_device["cpu-worker0"] <= 2 and by_device["cpu-worker1"] <= 2
    assert run["staleness"]["median"] <= run["staleness"]["p90"]


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_esync_asks_its_rules_in_process_and_its_fast_workers_step_while_the_slow_one_computes(virtual_jobs):
    rounds = {folder: runlog.DeviceLog(folder).ordered()
              for folder in glob.glob(os.path.join(virtual_jobs[0], "lenet", "esync", "*", "cpu-worker*"))}
    steps = {os.path.basename(folder): sorted(runlog.local_steps(r) for r in records)
             for folder, records in rounds.items()}

    assert set(steps) == {"cpu-worker0", "cpu-worker1", "cpu-worker2"}
    median = {name: values[len(values) // 2] for name, values in steps.items()}
    assert median["cpu-worker2"] == 1 and median["cpu-worker0"] >= 3 and median["cpu-worker1"] >= 3


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_a_summary_refuses_to_mix_a_virtual_run_with_a_real_one(virtual_jobs, tmp_path):
    import shutil

    mode_dir = tmp_path / "lenet" / "sync"
    shutil.copytree(os.path.join(virtual_jobs[0], "lenet", "sync"), mode_dir)
    meta_path, = glob.glob(str(mode_dir / "*" / "cpu-worker1" / runlog.META_FILE))
    meta = json.load(open(meta_path))
    meta["clock"] = {"kind": runlog.REAL_CLOCK}
    json.dump(meta, open(meta_path, "w"))

    result = subprocess.run([sys.executable, os.path.join(ROOT, "summary.py"), "-b", str(tmp_path), "-n", "lenet",
                             "-m", "sync"], capture_output=True, text=True, timeout=60)

    assert result.returncode == 2 and "mixes runs on a virtual clock" in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's results do not depend on the machine's load (the slow tests' group)
def test_a_virtual_runs_progress_is_told_in_virtual_seconds(virtual_jobs):
    from launcher.supervision import Progress

    mode_dir = os.path.join(virtual_jobs[0], "lenet", "sync")
    progress = Progress("sync 1/1", mode_dir, every=1.0, virtual=True)
    logged_time = runlog.RunFollower(mode_dir).update().training_time

    assert progress.line().startswith(f"[sync 1/1] {logged_time:6.1f} virtual s (")
    assert f"in {logged_time:.1f} virtual s of training" in progress.finished_line()


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_sixty_four_workers_on_the_virtual_clock_complete_a_job_of_one_virtual_second(tmp_path):
    logs = str(tmp_path / "logs")
    code, output = virtual_run(logs, "sync", ",".join(["1"] * 48 + ["4"] * 16), "--max-time", "1", "--step-seconds",
                               "0.1", "--snapshot-seconds", "1", "--", "-b", "32")

    assert code == 0, output
    folders = glob.glob(os.path.join(logs, "lenet", "sync", "*", "cpu-worker*"))
    run = summary.summarize_mode(os.path.join(logs, "lenet"), "sync")
    assert len(folders) == 64 and run["num_workers"] == 64 and run["elapsed_time"] >= 1.0


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_jobs_run_the_repeats_at_once_each_as_it_would_run_alone(tmp_path):
    from analysis import regime_map

    def regimes(jobs, logs):
        return subprocess.run([sys.executable, LAUNCH_PY, "regimes", "--clock", "virtual", "--step-seconds", "0.05",
                               "--jobs", str(jobs), "--links", "loopback", "--profiles", "1,4", "--splits", "iid",
                               "--schemes", "async", "--repeats", "2", "--max-time", "0.5", "--snapshot-seconds",
                               "0.25", "--dataset", "mnist-5k", "--higher-targets", "", "--no-figures", "-ld", logs],
                              capture_output=True, text=True, env=launcher_env(), timeout=300)

    at_once, in_turn = regimes(2, str(tmp_path / "at-once")), regimes(1, str(tmp_path / "in-turn"))

    assert at_once.returncode == 0 and in_turn.returncode == 0, at_once.stderr + in_turn.stderr
    assert "queued" not in at_once.stdout and at_once.stdout.count("(output in ") == 2
    for repeat in (1, 2):
        folder = regime_map.run_dir(str(tmp_path / "at-once"), "loopback", "1,4", "iid", repeat, "async")
        assert json.load(open(os.path.join(folder, regime_map.STATUS_FILE))) == {"exit_code": 0}
        assert glob.glob(os.path.join(folder, "launch-*.txt"))
    runs = {name: {path.split(os.sep, 1)[1]: content for path, content in logged_runs(str(tmp_path / name)).items()}
            for name in ("at-once", "in-turn")}
    assert runs["at-once"] and runs["at-once"] == runs["in-turn"]


@pytest.mark.slow
@pytest.mark.beside_others  # it waits on a bound, times nothing
def test_jobs_interrupted_stop_every_run_in_flight_and_start_no_other(tmp_path):
    import signal

    from tests.test_launch import recorded_pids, still_running, wait_for

    logs = str(tmp_path / "logs")
    with open(str(tmp_path / "out.txt"), "w") as out:
        proc = subprocess.Popen([sys.executable, LAUNCH_PY, "regimes", "--clock", "virtual", "--step-seconds", "0.02",
                                 "--jobs", "2", "--links", "loopback", "--profiles", "1,4", "--splits", "iid",
                                 "--schemes", "sync,local", "--repeats", "3", "--max-time", "600",
                                 "--snapshot-seconds", "100", "--dataset", "mnist-5k", "--higher-targets", "",
                                 "--no-figures", "-ld", logs], stdout=out, stderr=subprocess.STDOUT,
                                env=launcher_env())
    try:
        wait_for(lambda: len(recorded_pids(logs)) >= 2, 120, "two runs in flight")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    output = open(str(tmp_path / "out.txt")).read()

    assert code == 130 and "interrupted" in output, output
    assert output.count("(output in ") == 2  # the other four runs never started
    assert still_running(recorded_pids(logs)) == []


def logged_runs(logs):
    """{path under logs: bytes} of every iteration log of a map's runs."""
    return {os.path.relpath(path, os.path.dirname(logs)): open(path, "rb").read()
            for path in sorted(glob.glob(os.path.join(logs, "**", "iter-*.txt"), recursive=True))}


def test_jobs_on_the_real_clock_are_refused_in_one_line():
    from launcher import backends
    from launcher.studies import parallel

    for hosts in ("local", "netns"):
        with pytest.raises(UsageError, match="--jobs 2 runs several runs at once.*give --clock virtual"):
            parallel.check_jobs(2, backends.of(SimpleNamespace(clock=runlog.REAL_CLOCK, hosts=hosts, tracker=None)))
    parallel.check_jobs(2, backends.of(SimpleNamespace(clock=runlog.VIRTUAL_CLOCK)))


def test_the_regime_map_charges_its_links_on_the_virtual_clock_and_takes_its_limits_from_the_devices(tmp_path):
    from launcher.studies import regime_map as regimes_command

    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps({"network": "lenet", "dataset": "mnist-5k", "batch_size": 32, "step_seconds": 0.01}))
    ns, plan, runs = regimes_command.parse([
        "--clock", "virtual", "--step-seconds", str(devices), "--links", "loopback,3", "--profiles", "1,4",
        "--splits", "iid", "--schemes", "sync,local", "--repeats", "1", "--dataset", "mnist-5k", "-ld", str(tmp_path),
        "--", "-b", "32"])

    shaped = [run for label, _, run in runs if "R = 3" in label]
    assert all(run.clock == "virtual" and run.cluster.hosts == "local" and run.charges.step_seconds == 0.01
               for _, _, run in runs)
    assert {run.cluster.comm_ratio for run in shaped} == {3.0} and "lasts 3 fast steps" in shaped[0].describe_links()
    regimes_command.measure_limits(ns, plan, ["-b", "32"])
    assert json.load(open(tmp_path / "limits.json")) == {"1,4": [3200.0, 800.0]}  # 32 samples a 10 ms, and x 4


def test_runs_at_once_are_numbered_among_all_the_commands_runs(monkeypatch, capsys, tmp_path):
    """A resumed command runs what is left: its progress lines number each run among all of the command's, as the
    lines of the runs kept from before do (not "9/8")."""
    from launcher.studies import parallel

    monkeypatch.setattr(parallel, "start", lambda experiment: subprocess.Popen(["true"]))
    left = SimpleNamespace(log_dir=str(tmp_path), run_id="left")

    code = parallel.run_at_once([(3, "the fourth", left), (4, "the fifth", left)], 2, "regimes", total=5)
    lines = capsys.readouterr().out.splitlines()

    assert code == 0
    assert {line.split(" (output")[0] for line in lines} == {
        "[regimes 4/5] the fourth", "[regimes 5/5] the fifth", "[regimes 4/5] the fourth: done",
        "[regimes 5/5] the fifth: done"}


def test_the_maps_progress_names_a_profile_of_many_devices_as_its_tables_do(tmp_path, capsys):
    from launcher.studies import regime_map as regimes_command

    ns, plan, runs = regimes_command.parse([
        "--clock", "virtual", "--step-seconds", "0.01", "--links", "loopback", "--profiles", "12x1,4x4",
        "--splits", "iid", "--schemes", "sync", "--repeats", "1", "--dataset", "mnist-5k", "-ld", str(tmp_path)])
    regimes_command.measure_limits(ns, plan, [])

    assert [label for label, _, _ in runs] == ["sync, loopback, workers 12x1,4x4, i.i.d., repeat 1"]
    assert "[regimes] workers 12x1,4x4: " in capsys.readouterr().out
