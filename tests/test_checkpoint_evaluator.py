"""The evaluator: each checkpoint exactly once, a damaged one skipped, and its log."""
import json

import pytest

from data import load_test_set
from tests.checkpoint_helpers import DESCRIPTION, args_for, flip_a_byte, lenet, write_checkpoints
from tests.jobs import SAMPLE_DATA
from training.checkpoints import CheckpointError, CheckpointWriter
from training.evaluator import EVALUATOR_LOG, EvaluationLog, Evaluator, pending_steps, read_evaluations


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


# ----------------------------------------------------------------------------------------------
# The evaluator: each checkpoint exactly once


def test_pending_steps_are_the_unevaluated_ones_oldest_first():
    assert pending_steps([30, 10, 20, 40], [10, 30]) == [20, 40]


def evaluator(tmp_path, timeout=5.0):
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")
    args = args_for("-m", "evaluate", "--train-dir", str(tmp_path / "train"), "-ld", str(tmp_path / "logs"),
                    "--eval-timeout", str(timeout))
    return Evaluator(args, lenet(seed=7), images, labels)


def test_the_evaluator_tests_every_checkpoint_once_and_stops_at_the_final_marker(tmp_path):
    models = write_checkpoints(tmp_path / "train", [10, 20, 30])
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")
    clock = FakeClock()

    evaluated = evaluator(tmp_path).run(clock, clock.sleep)

    records = read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))
    assert evaluated == 3 and [r["step"] for r in records] == [10, 20, 30]
    assert [r["accuracy"] for r in records] == [models[s].accuracy(images, labels) for s in (10, 20, 30)]
    assert [r["time"] for r in records] == [1.0, 2.0, 3.0]


def test_a_restarted_evaluator_skips_what_it_already_evaluated(tmp_path):
    write_checkpoints(tmp_path / "train", [10, 20])
    clock = FakeClock()
    evaluator(tmp_path).run(clock, clock.sleep)

    again = evaluator(tmp_path).run(clock, clock.sleep)

    assert again == 0
    assert [r["step"] for r in read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))] == [10, 20]


def test_the_evaluator_picks_up_checkpoints_written_while_it_waits(tmp_path):
    write_checkpoints(tmp_path / "train", [10], final=False)
    clock = FakeClock()
    later = {1.0: 20, 2.0: 30}

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now in later:
            step = later.pop(clock.now)
            writer = CheckpointWriter(str(tmp_path / "train"), 10, DESCRIPTION)
            (writer.finish if step == 30 else writer.save)(step, 1.0, 0.0, lenet(step), None)

    evaluator(tmp_path).run(clock, sleep)

    assert [r["step"] for r in read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))] == [10, 20, 30]


def test_the_evaluator_gives_up_after_the_timeout_without_a_new_checkpoint(tmp_path):
    write_checkpoints(tmp_path / "train", [10], final=False)
    clock = FakeClock()

    evaluated = evaluator(tmp_path, timeout=5.0).run(clock, clock.sleep)

    assert evaluated == 1 and 5.0 <= clock.now <= 6.0


def test_a_checkpoint_of_another_network_stops_the_evaluator(tmp_path):
    writer = CheckpointWriter(str(tmp_path / "train"), 10, {**DESCRIPTION, "network": "mlp"})
    writer.finish(10, 1.0, 0.0, lenet(), None)
    clock = FakeClock()

    with pytest.raises(CheckpointError, match="network mlp, not lenet"):
        evaluator(tmp_path).run(clock, clock.sleep)


def test_the_evaluator_skips_a_damaged_checkpoint_once_with_a_warning_and_evaluates_the_rest(tmp_path, caplog):
    write_checkpoints(tmp_path / "train", [10, 20, 30])
    flip_a_byte(str(tmp_path / "train" / "ckpt-20.params"))
    clock = FakeClock()

    evaluated = evaluator(tmp_path).run(clock, clock.sleep)

    assert evaluated == 2
    assert [r["step"] for r in read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))] == [10, 30]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "checkpoint at step 20" in warnings[0] and "damaged" in warnings[0]


def test_an_unreadable_evaluation_line_is_skipped(tmp_path):
    path = tmp_path / EVALUATOR_LOG
    path.write_text(json.dumps({"step": 10, "accuracy": 0.5}) + "\n" + '{"step": 2')

    assert EvaluationLog(str(path)).steps == [10]
