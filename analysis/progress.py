"""Where a search's best trials stood when they first reached the target: the rounds, and the local steps each
device took until then. Read off the trials' own logs, this tells a scheme's progress per round against one
device's per step.

    python -m analysis.progress logs/tune-paper/lenet_fashion-mnist_1-1-1-1-20-20_loopback_iid --target 0.8
"""
import argparse
import glob
import os

from analysis import scheme_names
from analysis.tables import markdown_table
from training import runlog
from training.evaluator import EVALUATOR_LOG, read_evaluations


def first_reached(evaluations, target):
    """The evaluator's first test at or above `target`, in training time, or None."""
    return next((e for e in sorted(evaluations, key=lambda e: e["time"]) if e["accuracy"] >= target), None)


def steps_until(mode_dir, seconds):
    """{slowdown: [local steps of each device of that slowdown in the rounds logged by `seconds` of training]}."""
    steps = {}
    for _, _, folder in runlog.device_folders(mode_dir):
        rounds = [r for r in runlog.DeviceLog(folder).ordered() if r["total_time"] <= seconds + 1e-9]
        slowdown = runlog.read_meta(folder).get("slowdown")
        steps.setdefault(slowdown, []).append(sum(runlog.local_steps(r) for r in rounds))
    return steps


def trial_at_target(trial_dir, mode, target):
    """(seconds, round, {slowdown: [steps]}) of one trial where it reached `target`, or None."""
    found = glob.glob(os.path.join(trial_dir, "*", mode, EVALUATOR_LOG))
    hit = first_reached(read_evaluations(found[0]), target) if found else None
    if hit is None:
        return None
    return hit["time"], hit["step"], steps_until(os.path.dirname(found[0]), hit["time"])


def best_trials(cell_dir, scheme, target, count=1):
    """The `count` trials of a scheme that reached `target` soonest: [(trial, seconds, round, steps)]."""
    mode, _ = scheme_names.mode_of(scheme)
    reached = []
    for trial in glob.glob(os.path.join(cell_dir, scheme, "trial-*")):
        at = trial_at_target(trial, mode, target) if os.path.isdir(trial) else None
        if at:
            reached.append((os.path.basename(trial), *at))
    return sorted(reached, key=lambda row: row[1])[:count]


def table(cell_dir, target, count):
    rows = []
    for scheme in sorted(os.listdir(cell_dir)):
        if not os.path.isdir(os.path.join(cell_dir, scheme)) or scheme == "figures":
            continue
        for trial, seconds, step, steps in best_trials(cell_dir, scheme, target, count):
            fast, *slow = sorted(steps)
            rows.append([scheme, trial, f"{seconds:.1f}", str(step), ", ".join(map(str, steps[fast])),
                         "; ".join(", ".join(map(str, steps[s])) for s in slow) or "–"])
    return markdown_table(["scheme", "trial", f"s to {target:g}", "rounds", "fast devices' local steps",
                           "slower devices' local steps"], rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cell_dir", help="a cell's folder of launch.py tune: <log-dir>/<cell>/")
    p.add_argument("--target", type=float, default=0.8)
    p.add_argument("--best", type=int, default=1, help="trials per scheme (default: its best)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.cell_dir):
        p.error(f"{args.cell_dir}: no such folder")
    print(table(args.cell_dir, args.target, args.best))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
