"""--max-restarts: a process of a launcher job killed mid-training, the job started again from its newest
checkpoint, its logs and the evaluator's curve going on on the same training clock; a second kill past the limit
ends the run with the launcher's failure line and nothing left running."""
import glob
import json
import os
import signal
import time

import pytest

from analysis import paper, summary
from launcher.commands import CHECKPOINT_EVERY
from tests.test_launch import LENET, launcher, pid_of, read_output, recorded_pids, still_running, wait_for
from training import runlog

pytestmark = [pytest.mark.slow, pytest.mark.beside_others]  # the checks do not depend on timing

# A count of rounds, not a training time: the kills come at given rounds, which a busy machine reaches later.
MAX_ITERS = 150


def rounds_logged(logs, mode, since=0.0):
    """The most rounds a worker of the run has logged (written after `since`, a time.time())."""
    mode_dir = os.path.join(logs, "lenet", mode)
    if not os.path.isdir(mode_dir):
        return 0
    return max((sum(1 for path in glob.glob(os.path.join(folder, "iter-*.txt")) if written_after(path, since))
                for _, _, folder in runlog.device_folders(mode_dir)), default=0)


def written_after(path, since):
    """Whether `path` was written after `since`; False where it is gone (a restart removes the rounds it repeats)."""
    try:
        return os.path.getmtime(path) > since
    except FileNotFoundError:
        return False


def started(logs, mode, name):
    try:
        return pid_of(logs, mode, name)
    except (OSError, ValueError, StopIteration):  # not recorded (yet) by the job now running
        return None


def kill_during_training(logs, mode, name, after_rounds, since=0.0):
    """SIGKILL `name` once a worker has logged `after_rounds` rounds since `since`; the rounds it had logged then."""
    wait_for(lambda: started(logs, mode, name) and rounds_logged(logs, mode, since) >= after_rounds, 60,
             f"{after_rounds} rounds of {mode}")
    os.kill(pid_of(logs, mode, name), signal.SIGKILL)
    return rounds_logged(logs, mode)


def run_with_kills(tmp_path, mode, victims, max_restarts):
    """A launcher run of `mode` whose processes `victims` are SIGKILLed one after another: the first once the job
    has trained past its first checkpoint, each later one once the restarted job has trained a few rounds; (logs,
    exit code, output, the rounds logged at each kill)."""
    logs = str(tmp_path / "logs")
    # ESync under the paper's rule: on equal devices about one local step a round, as many rounds as SSGD's
    policy = ["--esync-policy", "apply"] if mode == "esync" else []
    args = ["--modes", mode, "--devices", "cpu,cpu", "--max-iters", str(MAX_ITERS), "--max-time", "120", *policy,
            "--max-restarts", str(max_restarts), "--no-figures", *LENET]
    with launcher(args, logs) as proc:
        killed_at = [kill_during_training(logs, mode, victims[0], CHECKPOINT_EVERY + 5)]
        for kill, name in enumerate(victims[1:], 1):
            wait_for(lambda: f"restart {kill} of {max_restarts}" in read_output(proc), 60, "the restart")
            killed_at.append(kill_during_training(logs, mode, name, 5, since=time.time()))
        proc.wait(timeout=300)
        output = read_output(proc)
    return logs, proc.returncode, output, killed_at


@pytest.mark.long  # three jobs, each killed and restarted
def test_a_killed_worker_server_and_state_server_each_restart_the_job_from_its_newest_checkpoint(tmp_path):
    victims = ["worker-1", "server-0", "state-server"]
    logs, code, output, killed_at = run_with_kills(tmp_path, "esync", victims, max_restarts=3)

    run = summary.load_summary(os.path.join(logs, "lenet"), "esync")
    restarts = json.load(open(os.path.join(logs, "lenet", "esync", "processes", "network.json")))["restarts"]
    assert code == 0, output
    assert [r["process"] for r in restarts] == victims and all("SIGKILL" in r["reason"] for r in restarts)
    for n, (restart, rounds) in enumerate(zip(restarts, killed_at), 1):
        step = restart["resumed_from_step"]
        assert rounds - CHECKPOINT_EVERY <= step <= rounds + 1  # at most one interval of steps lost
        assert f"{restart['process']} exited with signal SIGKILL: restart {n} of 3, from global step {step}" in output
    assert run["restarts"] == restarts  # one run, every round of it
    assert run["num_rounds"] == MAX_ITERS and all(not device["missing_iterations"]
                                                  for node in run["devices"].values() for device in node.values())
    assert still_running(recorded_pids(logs)) == []


def test_a_second_kill_past_the_limit_ends_the_run_with_its_failure_line_and_nothing_left(tmp_path):
    logs, code, output, _ = run_with_kills(tmp_path, "sync", ["worker-1", "worker-1"], max_restarts=1)

    after_the_restart = output.split("restart 1 of 1")[1]
    assert code == 1, output
    assert "launch.py: [sync 1/1] worker-1 (worker, pid" in after_the_restart and "SIGKILL" in after_the_restart
    assert still_running(recorded_pids(logs)) == []


@pytest.mark.long  # a paper run of two modes, one restarted
def test_paper_keeps_a_repeat_whose_run_restarted_in_table_1(tmp_path):
    """launch.py paper --max-restarts 1: the repeat's SSGD job loses a worker past its first checkpoint, goes on
    from it, and its run is a cell of Table 1 like any other, its restart in its summary."""
    logs = str(tmp_path / "logs")
    # no --dataset: the paper's, Fashion-MNIST, as tiny files where the tests put it (tests/conftest.py)
    # paper's runs stop at a training time: 6 s hold a few hundred rounds, the kill comes at the 55th
    args = ["--repeats", "1", "--splits", "iid", "--modes", "sync", "--esync-variants", "", "--slowdown", "1,1",
            "--max-time", "6", "--max-restarts", "1"]
    with launcher(args, logs, subprogram=["paper"]) as proc:
        kill_during_training(os.path.join(logs, "repeat-1"), "sync", "worker-1", CHECKPOINT_EVERY + 5)
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    assert "worker-1 exited with signal SIGKILL: restart 1 of 1" in output
    run = summary.load_summary(os.path.join(logs, "repeat-1", "lenet"), "sync")
    assert len(run["restarts"]) == 1 and run["restarts"][0]["resumed_from_step"] >= CHECKPOINT_EVERY
    report = json.load(open(os.path.join(logs, "lenet", paper.RESULTS_FILE)))
    assert report["cells"]["iid"]["sync"]["final_accuracy"]["n"] == 1
    assert still_running(recorded_pids(logs)) == []


# docs/failures.md's loop around each process of a job started by hand
LOOP = 'for attempt in 0 1 2 3; do "$@" && break; sleep 2; done'


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


# With the timed tests: the loops' restarts meet only if each process starts within the others' --sync-timeout. At 5 s,
# beside the heaviest tests, the four restarts of each loop once never met (a worker's start, its MXNet and data, came
# 2-4 s after the scheduler's): 10 s leaves room for that skew.
@pytest.mark.long  # four loops restarting a killed job, each waiting out a 10 s --sync-timeout
@pytest.mark.beside_others(False)
def test_by_hand_a_loop_around_each_process_restarts_the_job_from_its_newest_checkpoint(tmp_path):
    from launcher.cluster import ROOT, ProcessGroup, dmlc_env, free_port
    from tests.jobs import LENET_ARGS
    import sys

    logs, train_dir = str(tmp_path / "logs"), str(tmp_path / "ckpt")
    main = os.path.join(ROOT, "main.py")
    common = ["-m", "sync", "--sync-timeout", "10"]
    # Each step padded to 4x its compute time (a sleep, no CPU), so that the kill, at the 15th round, comes long
    # before the last however busy the machine is: at full speed the job once ended before a busy test process saw
    # its 15th round.
    worker_args = common + [*LENET_ARGS, "--slowdown", "4", "--max-iters", str(MAX_ITERS), "-e", "0", "-ld", logs,
                            "--node-name", "node", "--train-dir", train_dir, "--save-freq", str(CHECKPOINT_EVERY),
                            "--keep-checkpoints", "2", "--resume-if-saved"]
    port = free_port()
    with ProcessGroup(str(tmp_path / "processes")) as group:
        roles = [("scheduler", "scheduler", common), ("server", "server-0", common),
                 ("worker", "worker-0", worker_args + ["--worker-index", "0"]),
                 ("worker", "worker-1", worker_args + ["--worker-index", "1"])]
        loops = {name: group.start(name, ["bash", "-c", LOOP, "loop", sys.executable, main, *args],
                                   dmlc_env(role, port, 1, 2), role=role) for role, name, args in roles}
        worker_folder = os.path.join(logs, "node", "cpu-worker1")
        wait_for(lambda: len(glob.glob(os.path.join(worker_folder, "iter-*.txt"))) >= CHECKPOINT_EVERY + 5, 120,
                 "rounds past the first checkpoint")
        os.kill(children(loops["worker-1"].pid)[0], signal.SIGKILL)
        assert group.wait(list(loops.values()), 240), "the loops did not end"

        outputs = {name: open(proc.output).read() for name, proc in loops.items()}
        assert all(proc.poll() == 0 for proc in loops.values()), outputs
    # rank 0 (whichever worker registered first the second time) loads the checkpoint for everyone
    resumed = [line for name in ("worker-0", "worker-1") for line in outputs[name].splitlines()
               if "resuming at global step" in line]
    assert len(resumed) == 1 and int(resumed[0].split("global step ")[1].split()[0]) >= CHECKPOINT_EVERY, outputs
    assert sorted(os.listdir(worker_folder)) == sorted([f"iter-{n}.txt" for n in range(1, MAX_ITERS + 1)]
                                                       + ["meta.json", "model-final.params"])
