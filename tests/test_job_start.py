"""How a job starts: one worker a position (workers that claim the same --worker-index end with one line naming the
ranks, before anything trains, on dist_sync and dist_async alike), and every worker's training clock starting
together after a barrier, however late a worker joined."""
import os
import time

import pytest

from launcher.cluster import ROOT, start_ps_job
from tests.jobs import LENET_ARGS, finish, iter_records, start_job, worker_folders
from training.faults.failures import EXIT_FAILURE

pytestmark = [pytest.mark.slow, pytest.mark.beside_others]  # nothing timed beyond a bound of seconds
LATE = 4.0  # seconds worker 1 starts after worker 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_workers_claiming_one_position_end_with_one_line_naming_both_ranks(processes, tmp_path, mode):
    workers = start_job(processes, mode, LENET_ARGS + ["-e", "0", "--max-iters", "5", "--sync-timeout", "20",
                                                      "--worker-index", "1"], log_dir=str(tmp_path / "logs"),
                        ps_args=["--sync-timeout", "20"])

    assert processes.wait(workers, 60), "the workers did not end"
    for worker in workers:
        errors = [line for line in open(worker.output).read().splitlines() if "ERROR" in line]
        assert worker.poll() == EXIT_FAILURE and len(errors) == 1, open(worker.output).read()[-2000:]
        assert "position 1 (--worker-index) is claimed by the workers of ranks 0, 1" in errors[0]
    assert not list((tmp_path / "logs").glob("node/*/iter-*.txt"))


def test_a_worker_that_starts_seconds_late_does_not_start_its_clock_earlier_or_stop_later(processes, tmp_path):
    log_dir = str(tmp_path / "logs")
    main = os.path.join(ROOT, "main.py")
    argv = [[main, "-m", "async", "-ld", log_dir, "--node-name", "node", *LENET_ARGS, "-e", "0", "--max-time", "2",
             "--worker-index", str(w)] for w in range(2)]

    def stagger():
        if processes.procs[-1].name == "worker-0":
            time.sleep(LATE)

    workers = start_ps_job(processes, [main, "-m", "async"], argv, after_each_start=stagger)
    finish(processes, workers, 120)

    folders = worker_folders(log_dir)
    first = [iter_records(folder)[0]["total_time"] for folder in folders]
    last = [max(os.path.getmtime(os.path.join(folder, name)) for name in os.listdir(folder)
                if name.startswith("iter-")) for folder in folders]
    # each clock starts at the barrier: the first step is well under the late start, and both stop at 2 s of it
    assert len(folders) == 2 and all(seconds < LATE / 2 for seconds in first), first
    assert abs(last[0] - last[1]) < 1.0, last
