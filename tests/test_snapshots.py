"""Rank 0's evaluation snapshots: a copy of the model every period of training time, written by a thread as a
checkpoint the evaluator reads, the final model's last; the evaluator's accuracy handed back."""
import os
import threading

import numpy as np
import pytest

from data import load_test_set
from tests.checkpoint_helpers import args_for, lenet
from tests.jobs import SAMPLE_DATA
from training import snapshots
from training.checkpoints import final_step, read_checkpoint, saved_steps
from training.evaluator import EVALUATOR_LOG, Evaluator, read_evaluations
from training.snapshots import SnapshotError, SnapshotWriter

DESCRIPTION = {"mode": "sync", "network": "lenet", "dataset": "mnist-5k"}


def test_a_snapshot_is_due_a_period_of_training_time_after_the_last_one(tmp_path):
    writer = SnapshotWriter(str(tmp_path), 0.5, DESCRIPTION)
    model = lenet()

    due = [writer.due(t) for t in (0.2, 0.5)]
    writer.take(7, 0.6, 0.1, model)
    after = [writer.due(t) for t in (0.9, 1.1)]
    writer.finish(8, 1.0, 0.1, model)

    assert due == [False, True] and after == [False, True]


def test_the_snapshots_are_checkpoints_of_the_model_the_evaluator_tests_and_the_final_one_comes_last(tmp_path):
    folder, logs = tmp_path / "snapshots", tmp_path / "logs"
    writer = SnapshotWriter(str(folder), 0.5, DESCRIPTION)
    models = {step: lenet(seed=step) for step in (10, 20, 30)}
    writer.take(10, 0.5, 0.0, models[10])
    writer.take(20, 1.0, 0.0, models[20])  # may be dropped while the thread writes step 10's
    writer.finish(30, 1.2, 0.0, models[30])
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")

    Evaluator(args_for("-m", "evaluate", "--train-dir", str(folder), "-ld", str(logs)), lenet(), images,
              labels).run()

    records = read_evaluations(str(logs / EVALUATOR_LOG))
    steps = saved_steps(str(folder))
    assert steps[0] == 10 and steps[-1] == 30 and final_step(str(folder)) == 30
    assert len(steps) + writer.dropped == 3 and writer.taken == len(steps)
    assert [r["step"] for r in records] == steps
    assert {r["step"]: r["accuracy"] for r in records} == {s: models[s].accuracy(images, labels) for s in steps}
    assert read_checkpoint(str(folder), 30)["time"] == 1.2
    assert snapshots.reported_accuracy(str(folder)) == records[-1]["accuracy"]


def test_a_snapshot_is_the_model_as_it_was_taken_not_as_it_is_written(tmp_path):
    model, later = lenet(seed=1), lenet(seed=2)
    writer = SnapshotWriter(str(tmp_path), 0.5, DESCRIPTION)
    arrays = model.snapshot()
    for name, param in model.net._collect_params_with_prefix().items():  # the model trains on after the copy
        param.set_data(later.net._collect_params_with_prefix()[name].data())
    writer.pending.put((5, 0.5, 0.0, arrays))
    writer.finish(6, 1.0, 0.0, model)
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")

    written = lenet(seed=3)
    written.load(os.path.join(str(tmp_path), "ckpt-5.params"))

    assert written.accuracy(images, labels) == lenet(seed=1).accuracy(images, labels)
    assert written.digest() != later.digest()


def test_a_snapshot_due_while_the_writer_is_busy_is_dropped_not_waited_for(tmp_path, monkeypatch):
    release = threading.Event()
    writing = threading.Event()

    def slow_write(*args, **kwargs):
        writing.set()
        release.wait(30)
    monkeypatch.setattr(snapshots.checkpoints, "write_checkpoint", slow_write)
    writer = SnapshotWriter(str(tmp_path), 0.5, DESCRIPTION)
    model = lenet()

    writer.take(1, 0.5, 0.0, model)
    assert writing.wait(30)
    writer.take(2, 1.0, 0.0, model)  # queued
    writer.take(3, 1.5, 0.0, model)  # dropped: one is written, one waits
    release.set()
    writer.finish(4, 2.0, 0.0, model)

    assert (writer.taken, writer.dropped) == (3, 1)


def test_a_failed_write_stops_training_with_the_reason_and_never_hangs(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(snapshots.checkpoints, "write_checkpoint", full_disk)
    writer = SnapshotWriter(str(tmp_path), 0.5, DESCRIPTION)
    model = lenet()
    writer.take(1, 0.5, 0.0, model)

    with pytest.raises(SnapshotError, match="No space left on device"):
        writer.finish(2, 1.0, 0.0, model)
    assert final_step(str(tmp_path)) is None


@pytest.mark.parametrize("argv, message", [
    (["--snapshot-seconds", "1"], "--snapshot-seconds and --snapshot-dir go together"),
    (["--snapshot-dir", "S"], "--snapshot-seconds and --snapshot-dir go together"),
    (["--snapshot-seconds", "1", "--snapshot-dir", "S", "--train-dir", "S"], "is --train-dir too"),
])
def test_bad_snapshot_options_are_refused(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)

    with pytest.raises(SnapshotError, match=message):
        snapshots.check_snapshot_dir(args_for(*argv))


def test_the_folder_of_an_earlier_finished_job_is_refused_before_the_network_and_by_rank_0(tmp_path):
    writer = SnapshotWriter(str(tmp_path), 0.5, DESCRIPTION)
    writer.finish(3, 1.0, 0.0, lenet())

    with pytest.raises(SnapshotError, match="holds the snapshots of an earlier job .up to step 3."):
        snapshots.check_snapshot_dir(args_for("--snapshot-seconds", "1", "--snapshot-dir", str(tmp_path)))
    with pytest.raises(SnapshotError, match="earlier job"):
        SnapshotWriter(str(tmp_path), 0.5, DESCRIPTION)


def test_small_parameters_are_copied_at_once_and_large_ones_by_the_engine():
    import mxnet as mx

    from training.model import SNAPSHOT_ENGINE_COPY, copy_of

    small, large = mx.nd.ones((10,)), mx.nd.ones((SNAPSHOT_ENGINE_COPY,))

    assert isinstance(copy_of(small), np.ndarray) and isinstance(copy_of(large), mx.nd.NDArray)


def test_a_model_keeps_the_test_set_it_tested_as_inputs_and_tests_a_new_one_afresh(monkeypatch):
    from training import model as model_module

    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")
    tested = lenet(seed=1)
    first = tested.test(images, labels)
    kept = tested._kept_test[2]

    assert tested.test(images, labels) == first and tested._kept_test[2] is kept  # the same arrays: kept
    half = tested.test(images[:500], labels[:500])
    assert tested._kept_test[0] is not images and len(tested._kept_test[2]) == 1 and half != first
    monkeypatch.setattr(model_module, "KEPT_TEST_BYTES", 1000)  # a set too big to keep is made anew each time
    fresh = lenet(seed=1)
    assert fresh.test(images, labels) == first and fresh._kept_test is None
