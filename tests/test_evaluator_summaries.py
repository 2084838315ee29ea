"""The evaluator process's log in summary.py's JSON and drawer.py's figures."""
import json
import os

import pytest

from analysis import figures as drawer
from analysis import metrics
from tests import logfactory
from tests.logfactory import NETWORK
from tests.test_drawer import assert_real_png, figure_path, run_drawer
from tests.test_summary import load_summary, run_summary
from training.evaluator import EVALUATOR_LOG

STEPS = (10, 20, 30, 40)


def write_evaluator_log(base, mode, steps=STEPS, extra_lines=()):
    """Evaluations of checkpoints at `steps` beside a run's node folders; returns the records."""
    records = [{"step": step, "time": step * 0.1, "accuracy": round(0.5 + step / 100, 4), "checkpoint":
                f"ckpt-{step}.params"} for step in steps]
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    with open(os.path.join(base, NETWORK, mode, EVALUATOR_LOG), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return records


@pytest.fixture
def evaluated_run(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync")
    records = write_evaluator_log(base, "sync")
    return base, records


def test_the_summary_holds_the_evaluator_curve_and_its_numbers(evaluated_run):
    base, records = evaluated_run

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync", "--target", "0.7")

    assert result.returncode == 0, result.stderr
    evaluator = load_summary(base, "sync")["evaluator"]
    assert evaluator["points"] == [[r["step"], r["time"], r["accuracy"]] for r in records]
    assert evaluator["num_checkpoints"] == 4
    assert (evaluator["final_accuracy"], evaluator["best_accuracy"]) == (0.9, 0.9)
    assert evaluator["time_to_accuracy"] == pytest.approx(2.0)


def test_a_run_with_an_evaluator_is_judged_by_the_evaluators_accuracy(evaluated_run):
    base, _ = evaluated_run
    plain = str(os.path.join(base, "plain"))
    logfactory.write_run(plain, "sync")
    run_summary("-b", base, "-n", NETWORK, "-m", "sync")
    run_summary("-b", plain, "-n", NETWORK, "-m", "sync")

    with_evaluator, without = load_summary(base, "sync"), load_summary(plain, "sync")

    assert "evaluator" not in without and without["accuracy_source"] == "worker"
    assert with_evaluator["accuracy_source"] == "evaluator"
    for key in ("final_accuracy", "best_accuracy", "time_to_accuracy"):
        assert with_evaluator[key] == with_evaluator["evaluator"][key]
    assert with_evaluator["final_accuracy"] != without["final_accuracy"]
    assert with_evaluator["accuracy_device"] == without["accuracy_device"]  # the worker's own points stay


def test_bad_evaluator_lines_are_reported_and_skipped(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync")
    write_evaluator_log(base, "sync", extra_lines=['{"step": 50, "time": 5', '{"step": "x", "time": 1, "accuracy": 1}'])

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync")

    assert result.returncode == 0, result.stderr
    assert [p[0] for p in load_summary(base, "sync")["evaluator"]["points"]] == list(STEPS)
    assert result.stderr.count("skipping line") == 2


def test_the_drawer_plots_the_evaluator_against_time_and_steps(evaluated_run, tmp_path):
    base, _ = evaluated_run
    outdir = str(tmp_path / "figures")

    result = run_drawer("-b", base, "-n", NETWORK, "-o", outdir)

    assert result.returncode == 0, result.stderr
    for stem in ("accuracy_vs_time", "accuracy_vs_step", "throughput", "traffic", "compute_ratio"):
        assert_real_png(figure_path(outdir, stem))


def test_a_run_evaluated_only_by_the_evaluator_still_gets_its_accuracy_curve_and_table_row(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync")
    for folder, _, files in os.walk(os.path.join(base, NETWORK, "sync")):
        for name in files:
            if name.startswith("iter-"):  # as with -e 0: no accuracy in the workers' logs
                path = os.path.join(folder, name)
                record = json.load(open(path))
                record.pop("accuracy", None)
                json.dump(record, open(path, "w"))
    write_evaluator_log(base, "sync")
    run_summary("-b", base, "-n", NETWORK, "-m", "sync")
    run = load_summary(base, "sync")

    assert drawer.draw_accuracy([run], NETWORK, False, None) is not None
    assert drawer.table_row(run, 0.7)[6:8] == [pytest.approx(2.0), 0.9]


def test_steps_of_the_workers_curve_count_global_steps_done():
    run = {"accuracy_device": "n/d", "devices": {"n": {"d": {"accuracy_points": [[0, 1.0, 0.5], [9, 2.0, 0.6]]}}},
           "evaluator": {"points": [[10, 2.0, 0.6]]}}

    assert drawer.step_curve(run) == ([1, 10], pytest.approx([0.5, 0.6]))
    assert drawer.step_curve(run, evaluator=True) == ([10], [0.6])


def test_no_evaluator_no_step_figure():
    assert drawer.draw_accuracy_vs_step([{"algorithm": "Sync", "devices": {}}], NETWORK) is None
    assert metrics.evaluator_points({"devices": {}}) == []
