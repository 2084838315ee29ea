"""Iteration logs of a worker slot that is started again: what an earlier run left behind is cleared first."""
import os

from training.iterlog import IterationLog


def test_a_resumed_worker_keeps_earlier_logs_and_removes_later_ones_and_unfinished_files(tmp_path):
    folder = tmp_path / "node" / "cpu-rank0"
    folder.mkdir(parents=True)
    for n in range(4):
        (folder / f"iter-{n}.txt").write_text("{}")
    (folder / ".iter-4.txt.k2j3h4.tmp").write_text('{"num_it')  # killed while writing iteration 4

    IterationLog(str(tmp_path), "node", "cpu-rank0", {"rank": 0}, first_iteration=2)

    assert sorted(os.listdir(folder)) == ["iter-0.txt", "iter-1.txt", "meta.json"]
