"""A run that diverges is seen and stopped: training/faults/divergence.py's rule, and a real launcher run at a rate far past
the edge of stability."""
import json
import math
import os

import pytest

from tests.test_launch import launcher, read_output
from training.faults import divergence
from training.loop import StopCondition, divergence_of


def evaluations(accuracies, losses):
    return [{"step": i, "accuracy": a, "loss": loss} for i, (a, loss) in enumerate(zip(accuracies, losses), 1)]


def test_a_loss_that_is_not_finite_is_a_divergence_at_once():
    assert "the test loss is nan at step 2" == divergence.verdict(evaluations([0.5, 0.1], [1.0, math.nan]), 0.1)
    assert divergence.verdict(evaluations([0.5], [math.inf]), 0.1).startswith("the test loss is inf")


def test_chance_accuracy_while_the_loss_rises_is_a_divergence_after_the_stated_evaluations():
    rising = evaluations([0.6, 0.1, 0.1, 0.1], [0.9, 2.0, 3.0, 4.0])

    assert divergence.verdict(rising[:3], 0.1) is None  # two evaluations at chance: not yet
    assert "at chance (0.100) in the last 3 evaluations while the test loss rose from 0.9 to 4" in \
        divergence.verdict(rising, 0.1)


def test_a_run_that_learns_slowly_or_sits_at_its_first_loss_has_not_diverged():
    slow = evaluations([0.1, 0.11, 0.12, 0.14], [2.30, 2.29, 2.25, 2.2])
    stuck = evaluations([0.1, 0.1, 0.1], [2.3, 2.31, 2.3])
    older = [{"step": 1, "accuracy": 0.1}, {"step": 2, "accuracy": 0.1}, {"step": 3, "accuracy": 0.1}]

    assert divergence.verdict(slow, 0.1) is None and divergence.verdict(stuck, 0.1) is None
    assert divergence.verdict(older, 0.1) is None  # logs without a loss are never judged


def test_chance_is_the_share_of_the_commonest_class():
    assert divergence.chance_accuracy([0, 1, 1, 2]) == 0.5


def test_a_divergence_stops_training_before_any_other_condition():
    stop = StopCondition(max_time=30.0)

    assert stop.reason(5, 1.0, 0.1, diverged="the test loss is nan at step 5") == \
        "diverged: the test loss is nan at step 5"
    assert stop.reason(5, 1.0, 0.1) is None
    # the round's record keeps why from the reason, whatever the evaluation at the stop says
    assert divergence_of(stop.reason(5, 1.0, 0.1, diverged="the test loss is nan")) == "the test loss is nan"
    assert divergence_of(stop.reason(5, 31.0, 0.1)) is None and divergence_of(None) is None


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_run_far_past_the_edge_of_stability_stops_early_as_diverged(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "local", "-n", "lenet", "--dataset", "mnist-5k", "--slowdown", "1", "--max-time", "60",
            "--no-figures", "--", "--learning-rate", "0.5"]
    with launcher(args, logs) as proc:
        proc.wait(timeout=120)
        output = read_output(proc)

    summary = json.load(open(os.path.join(logs, "lenet", "local", "Standalone.json")))
    records = [json.loads(line) for line in open(os.path.join(logs, "lenet", "local", "evaluator.jsonl"))]

    assert proc.returncode == 0, output
    assert summary["diverged"] and any("diverged" in r for r in records) and all("loss" in r for r in records)
    assert summary["elapsed_time"] < 30  # stopped long before its 60 s
