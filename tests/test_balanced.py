"""SSGD with load-balanced batches (LB-BSP): the batch plan, and a real job of 3 workers, one emulated 4x slower."""
import statistics

import pytest

from tests.jobs import LENET_ARGS, finish, iter_records, meta, run_main, start_job, worker_folders
from training import runlog
from training.schemes.balanced import batch_plan, drifted


def test_batches_are_proportional_to_speed_and_add_up_to_the_global_batch():
    # seconds per sample: two workers at 1 ms, one at 4 ms; speeds 1 : 1 : 0.25 of 2.25
    assert batch_plan([0.001, 0.001, 0.004], 192) == [85, 85, 22]  # 85.33, 85.33, 21.33: the remainder to the first
    assert batch_plan([0.002, 0.001], 3) == [1, 2]


def test_every_worker_keeps_at_least_the_minimum_however_slow():
    assert batch_plan([0.001, 1000.0], 64) == [63, 1]
    assert batch_plan([0.001, 1000.0], 64, minimum=8) == [56, 8]
    with pytest.raises(ValueError, match="cannot give 3 workers 2 samples each"):
        batch_plan([0.001] * 3, 5, minimum=2)


def test_a_plan_is_made_again_only_once_a_speed_drifts_past_the_threshold():
    assert not drifted([0.00105, 0.004], [0.001, 0.004], threshold=0.1)
    assert drifted([0.001, 0.0046], [0.001, 0.004], threshold=0.1)


@pytest.mark.slow
def test_the_slow_worker_gets_a_smaller_batch_the_batches_add_up_and_every_worker_stays_identical(processes, tmp_path):
    log_dir = str(tmp_path / "logs")
    # A count of steps, not seconds: what the job learns does not depend on how busy the machine is.
    args = LENET_ARGS + ["--max-iters", "150", "-e", "0", "--digest-weights"]
    workers = start_job(processes, "lb-bsp", args, num_workers=3, slowdowns=[1, 1, 4], log_dir=log_dir)
    finish(processes, workers, timeout=180)
    folders = {meta(f)["rank"]: f for f in worker_folders(log_dir)}
    runs = {rank: iter_records(folder) for rank, folder in folders.items()}

    assert [len(records) for records in runs.values()] == [150] * 3
    for n in range(150):
        assert len({records[n]["weights_digest"] for records in runs.values()}) == 1
        assert sum(records[n][runlog.BATCH] for records in runs.values()) == 3 * 64
    assert all(records[0][runlog.BATCH] == 64 and records[0][runlog.REPLANNED] for records in runs.values())
    slow = next(rank for rank, folder in folders.items() if meta(folder)["slowdown"] == 4)
    batches = {rank: statistics.median(r[runlog.BATCH] for r in records[10:]) for rank, records in runs.items()}
    assert all(batches[slow] < 0.5 * batch for rank, batch in batches.items() if rank != slow)
    assert [r["accuracy"] for r in runs[0] if "accuracy" in r][-1] >= 0.8


def test_lb_bsp_with_augmentation_is_one_line_and_exit_2():
    result = run_main(["-m", "lb-bsp", *LENET_ARGS, "--augment", "crop", "--max-iters", "1"],
                      env={"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1",
                           "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9"})

    assert result.returncode == 2
    assert "add --augment none" in result.stderr and len(result.stderr.strip().splitlines()) == 1
