"""analysis.progress: where a search's best trials stood when they first reached the target, from their logs."""
import json
import os

from analysis import progress
from training import runlog
from training.evaluator import EVALUATOR_LOG


def write_trial(cell_dir, scheme, trial, mode, devices, evaluations):
    """A trial's logs: `devices` [(slowdown, [local steps of each round])], one round a second."""
    mode_dir = os.path.join(cell_dir, scheme, f"trial-{trial}", "lenet", mode)
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
