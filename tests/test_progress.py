"""analysis.progress: where a search's best trials stood when they first reached the target, from their logs."""
import json
import os

from analysis import progress
from training import runlog
from training.evaluator import EVALUATOR_LOG


def write_trial(cell_dir, scheme, trial, mode, devices, evaluations, seed=None):
    """A trial's logs (`trial` the path below the scheme, a run of `seed` under it where given): `devices`
    [(slowdown, [local steps of each round])], one round a second."""
    run_dir = os.path.join(cell_dir, scheme, f"trial-{trial}" if isinstance(trial, int) else trial)
    mode_dir = os.path.join(run_dir, f"seed-{seed}" if seed is not None else "", "lenet", mode)
    for index, (slowdown, rounds) in enumerate(devices):
        writer = runlog.RunLogWriter(mode_dir, "node", f"cpu-worker{index}", {"slowdown": slowdown})
        for n, steps in enumerate(rounds, 1):
            writer.write(n, [{runlog.FORWARD_BACKWARD: 0.01}] * steps, 64 * steps, float(n))
        writer.flush()
        writer.close()
    with open(os.path.join(mode_dir, EVALUATOR_LOG), "w") as f:
        for step, seconds, accuracy in evaluations:
            f.write(json.dumps({"step": step, "time": seconds, "accuracy": accuracy}) + "\n")


def test_the_best_trial_of_each_scheme_counts_the_rounds_and_each_devices_steps_until_the_target(tmp_path):
    cell = str(tmp_path)
    write_trial(cell, "esync", 0, "esync", [(1.0, [5, 5, 5, 5]), (20.0, [1, 1, 1, 1])],
                [(2, 2.0, 0.5), (3, 3.0, 0.85), (4, 4.0, 0.9)])
    write_trial(cell, "esync", 1, "esync", [(1.0, [6, 6, 6, 6]), (20.0, [1, 1, 1, 1])], [(4, 4.0, 0.81)])
    write_trial(cell, "local", 0, "local", [(1.0, [1] * 10)], [(5, 5.0, 0.7)])  # never reached: left out

    best = progress.best_trials(cell, "esync", 0.8)
    assert best == [("trial-0", 3.0, 3, {1.0: [15], 20.0: [3]})]
    assert progress.best_trials(cell, "local", 0.8) == []
    text = progress.table(cell, 0.8, 2)
    assert "| esync | trial-0 | 3.0 | 3 | 15 | 3 |" in text and "| esync | trial-1 | 4.0 | 4 | 24 | 4 |" in text


def test_a_searchs_trials_of_several_seeds_and_of_a_widened_range_are_each_a_run():
    import tempfile

    with tempfile.TemporaryDirectory() as cell:  # as launch.py tune writes them: trial-N/seed-S, widened-K/trial-N
        write_trial(cell, "esync", 0, "esync", [(1.0, [5, 5])], [(2, 2.0, 0.85)], seed=1000)
        write_trial(cell, "esync", 0, "esync", [(1.0, [5, 5])], [(1, 1.5, 0.9)], seed=1001)
        write_trial(cell, "esync", "widened-1/trial-3", "esync", [(1.0, [4])], [(1, 1.0, 0.95)], seed=1000)

        assert progress.best_trials(cell, "esync", 0.8, count=3) == [
            ("widened-1/trial-3/seed-1000", 1.0, 1, {1.0: [4]}), ("trial-0/seed-1001", 1.5, 1, {1.0: [5]}),
            ("trial-0/seed-1000", 2.0, 2, {1.0: [10]})]


def test_a_run_without_an_evaluator_reaches_the_target_where_its_summarys_curve_does(tmp_path):
    from analysis import summary

    mode_dir = tmp_path / "esync" / "trial-0" / "seed-1000" / "lenet" / "esync"  # rank 0 tested in its loop
    writer = runlog.RunLogWriter(str(mode_dir), "node", "cpu-worker0", {"rank": 0, "slowdown": 1.0})
    for n, accuracy in enumerate([0.5, 0.7, 0.86, 0.9], 1):
        writer.write(n, [{runlog.FORWARD_BACKWARD: 0.01}] * 3, 64 * 3, float(n), accuracy=accuracy)
    writer.close()
    summary.write_summary(summary.summarize_mode(str(mode_dir.parent), "esync"), str(mode_dir.parent), "esync")

    assert progress.best_trials(str(tmp_path), "esync", 0.85) == [("trial-0/seed-1000", 3.0, 3, {1.0: [9]})]
