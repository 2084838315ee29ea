"""Where a search's best trials stood when they first reached the target: the rounds, and the local steps each
device took until then. Read off the trials' own logs, this tells a scheme's progress per round against one
device's per step.

    python -m analysis.progress logs/tune-paper/lenet_fashion-mnist_1-1-1-1-20-20_loopback_iid --target 0.8
"""
import argparse
import glob
import os

from analysis import scheme_names, summary
from analysis.tables import markdown_table
from training import runlog
from training.checks import first_sentence


def first_reached(evaluations, target):
    """The evaluator's first test at or above `target`, in training time, or None."""
    return next((e for e in sorted(evaluations, key=lambda e: e["time"]) if e["accuracy"] >= target), None)


def steps_until(mode_dir, seconds):
    """(the rounds logged by `seconds` of training, {slowdown: [local steps of each device of that slowdown in
    them]})."""
    steps, rounds = {}, 0
    for _, _, folder in runlog.device_folders(mode_dir):
        logged = [r for r in runlog.DeviceLog(folder).ordered() if r["total_time"] <= seconds + 1e-9]
        slowdown = runlog.read_meta(folder).get("slowdown")
        steps.setdefault(slowdown, []).append(sum(runlog.local_steps(r) for r in logged))
        rounds = max(rounds, len(logged))
    return rounds, steps


def trial_at_target(run_dir, mode, target):
    """(seconds, round, {slowdown: [steps]}) of one run of a trial where it reached `target`, or None: its
    evaluator's tests, or on a virtual clock rank 0's own (analysis.summary.run_evaluations)."""
    found = [folder for folder in glob.glob(os.path.join(run_dir, "*", mode)) if os.path.isdir(folder)]
    hit = first_reached(summary.run_evaluations(found[0]), target) if found else None
    if hit is None:
        return None
    rounds, steps = steps_until(found[0], hit["time"])
    return hit["time"], hit.get("step", rounds), steps


def runs_of(cell_dir, scheme):
    """{label: folder} of a scheme's runs: each trial (trial-N, and widened-K/trial-N of a widened range) and, where
    a trial ran several seeds, each seed-S under it; the label the path below the scheme's folder."""
    scheme_dir = os.path.join(cell_dir, scheme)
    trials = [*glob.glob(os.path.join(scheme_dir, "trial-*")),
              *glob.glob(os.path.join(scheme_dir, "widened-*", "trial-*"))]
    runs = {}
    for trial in filter(os.path.isdir, trials):
        for run in sorted(filter(os.path.isdir, glob.glob(os.path.join(trial, "seed-*")))) or [trial]:
            runs[os.path.relpath(run, scheme_dir)] = run
    return runs


def best_trials(cell_dir, scheme, target, count=1):
    """The `count` runs of a scheme's trials that reached `target` soonest: [(run, seconds, round, steps)]."""
    mode, _ = scheme_names.mode_of(scheme)
    reached = []
    for label, run in runs_of(cell_dir, scheme).items():
        at = trial_at_target(run, mode, target)
        if at:
            reached.append((label, *at))
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
    return markdown_table(["scheme", "trial (seed)", f"s to {target:g}", "rounds", "fast devices' local steps",
                           "slower devices' local steps"], rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=first_sentence(__doc__))
    p.add_argument("cell_dir", help="a cell's folder of launch.py tune: <log-dir>/<cell>/")
    p.add_argument("--target", type=float, default=0.8)
    p.add_argument("--best", type=int, default=1, help="runs per scheme (default: its best)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.cell_dir):
        p.error(f"{args.cell_dir}: no such folder")
    print(table(args.cell_dir, args.target, args.best))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
