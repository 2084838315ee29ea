"""--max-restarts: a process of a launcher job killed mid-training, the job started again from its newest
checkpoint, its logs and the evaluator's curve going on on the same training clock; a second kill past the limit
ends the run with the launcher's failure line and nothing left running."""
import glob
import json
import os
import signal

import pytest

from analysis import summary
from launcher.commands import CHECKPOINT_EVERY
from tests.test_launch import LENET, launcher, pid_of, read_output, recorded_pids, still_running, wait_for
from training import runlog

pytestmark = [pytest.mark.slow, pytest.mark.beside_others]  # the checks do not depend on timing

MAX_TIME = 6


def rounds_logged(logs, mode):
    mode_dir = os.path.join(logs, "lenet", mode)
    if not os.path.isdir(mode_dir):
        return 0
    return max((len(glob.glob(os.path.join(folder, "iter-*.txt"))) for _, _, folder in runlog.device_folders(mode_dir)),
               default=0)


def kill_during_training(logs, mode, name, after_rounds):
    """SIGKILL `name` once a worker has logged `after_rounds` rounds; the rounds logged then."""
    wait_for(lambda: rounds_logged(logs, mode) >= after_rounds, 120, f"{after_rounds} rounds of {mode}")
    os.kill(pid_of(logs, mode, name), signal.SIGKILL)
    return rounds_logged(logs, mode)


def run_with_kills(tmp_path, mode, name, kills, after_rounds=(CHECKPOINT_EVERY + 10,)):
    logs = str(tmp_path / "logs")
    args = ["--modes", mode, "--devices", "cpu,cpu", "--max-time", str(MAX_TIME), "--max-restarts", "1",
            "--no-figures", *LENET]
    with launcher(args, logs) as proc:
        killed_at = []
        for kill in range(kills):
            if kill:  # the restarted job's processes have recorded themselves anew
                wait_for(lambda: "restart 1 of 1" in read_output(proc), 60, "the restart")
            killed_at.append(kill_during_training(logs, mode, name, after_rounds[min(kill, len(after_rounds) - 1)]))
        proc.wait(timeout=300)
        output = read_output(proc)
    return logs, proc.returncode, output, killed_at


@pytest.mark.parametrize("mode, name", [("sync", "worker-1"), ("sync", "server-0"), ("esync", "state-server")])
def test_a_killed_process_restarts_the_job_from_its_newest_checkpoint_and_the_run_ends_well(tmp_path, mode, name):
    logs, code, output, (killed_at,) = run_with_kills(tmp_path, mode, name, kills=1)

    run = summary.load_summary(os.path.join(logs, "lenet"), mode)
    restarts = json.load(open(os.path.join(logs, "lenet", mode, "processes", "network.json")))["restarts"]
    assert code == 0, output
    assert len(restarts) == 1 and restarts[0]["process"] == name and "SIGKILL" in restarts[0]["reason"]
    step = restarts[0]["resumed_from_step"]
    assert killed_at - CHECKPOINT_EVERY <= step <= killed_at + 1  # at most one interval of steps lost
    assert f"{name} exited with signal SIGKILL: restart 1 of 1, from global step {step}" in output
    assert run["restarts"] == restarts and run["elapsed_time"] >= MAX_TIME  # one run, its whole training time
    assert still_running(recorded_pids(logs)) == []


def test_a_second_kill_past_the_limit_ends_the_run_with_its_failure_line_and_nothing_left(tmp_path):
    logs, code, output, _ = run_with_kills(tmp_path, "sync", "worker-1", kills=2,
                                           after_rounds=(CHECKPOINT_EVERY + 10, 2 * CHECKPOINT_EVERY + 10))

    after_the_restart = output.split("restart 1 of 1")[1]
    assert code == 1, output
    assert "launch.py: [sync 1/1] worker-1 (worker, pid" in after_the_restart and "SIGKILL" in after_the_restart
    assert still_running(recorded_pids(logs)) == []
