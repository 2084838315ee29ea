"""A real job of SSGD with backup workers: scheduler, server, the Django state server and 3 workers, one emulated
4x slower, one backup: each step applies the first 2 gradients."""
import collections
import os

import pytest

from launcher.cluster import start_state_server
from tests.jobs import LENET_ARGS, finish, iter_records, meta, run_main, start_job, worker_folders
from training import runlog

pytestmark = pytest.mark.slow  # real processes


def test_each_step_applies_the_first_gradients_drops_the_slow_workers_and_every_worker_ends_identical(
        processes, tmp_path):
    state_port = start_state_server(processes)
    log_dir = str(tmp_path / "logs")
    # A count of rounds, not seconds: what the job learns does not depend on how busy the machine is.
    args = LENET_ARGS + ["-port", str(state_port), "--backup-workers", "1", "--max-iters", "250", "-e", "0"]
    workers = start_job(processes, "backup", args, num_workers=3, slowdowns=[1, 1, 4], log_dir=log_dir)
    finish(processes, workers, timeout=180)
    folders = {meta(f)["rank"]: f for f in worker_folders(log_dir)}
    runs = {rank: iter_records(folder) for rank, folder in folders.items()}

    finals = {open(os.path.join(f, runlog.FINAL_MODEL_FILE), "rb").read() for f in folders.values()}
    assert len(finals) == 1
    slow = next(rank for rank, folder in folders.items() if meta(folder)["slowdown"] == 4)
    dropped = {rank: sum(r.get(runlog.DROPPED, False) for r in records) / len(records) for rank, records in runs.items()}
    fast_dropped = max(share for rank, share in dropped.items() if rank != slow)
    assert dropped[slow] > 0.5 and dropped[slow] > 2 * fast_dropped  # the 4x slower one mostly comes last
    assert all(r[runlog.LATE_BY] >= 1 for records in runs.values() for r in records if r.get(runlog.DROPPED))
    for records in runs.values():  # a worker's gradient belongs to the newest step it saw
        steps = [r[runlog.BACKUP_STEP] for r in records if runlog.BACKUP_STEP in r]
        assert steps == sorted(steps)
    # Every step applied the first 2 gradients (the last one counted may have been accepted as the job stopped).
    accepted = collections.Counter(r[runlog.BACKUP_STEP] for records in runs.values() for r in records
                                   if r.get(runlog.DROPPED) is False)
    last = max(accepted)
    assert sorted(accepted) == list(range(last + 1))
    assert all(accepted[step] == 2 for step in range(last)) and accepted[last] <= 2
    assert [r["accuracy"] for r in runs[0] if "accuracy" in r][-1] >= 0.8


@pytest.mark.parametrize("backup, message", [("3", "leaves no gradient to apply"), ("0", "expected a positive")])
def test_too_many_or_no_backup_workers_is_one_line_and_exit_2(backup, message):
    result = run_main(["-m", "backup", *LENET_ARGS, "--backup-workers", backup, "--max-iters", "1"],
                      env={"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "3", "DMLC_NUM_SERVER": "1",
                           "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9"})

    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
