"""9. Evaluation off the training path: the same launcher runs with rank 0's snapshots and the evaluator process
against no evaluation at all (samples/s side by side), and what one snapshot costs rank 0's training thread
against its step (bench/snapshot_cost.py)."""
import json
import os
import statistics
import subprocess
import sys

from analysis.tables import markdown_table
from bench.sections.common import fmt, launch, log
from launcher.cluster import ROOT
from launcher.experiment import DEFAULT_SNAPSHOT_SECONDS
from training.devices import threads


def snapshot_cost(network, steps):
    env = {**os.environ, **threads.ONE_THREAD}
    result = subprocess.run([sys.executable, "-m", "bench.snapshot_cost", "-n", network, "--steps", str(steps)],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"bench.snapshot_cost -n {network} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(cfg, workdir, earlier):
    profile, seconds = cfg["evaluation_profile"], cfg["evaluation_seconds"]
    runs = []
    for mode in cfg["evaluation_modes"]:
        for repeat in range(cfg["evaluation_repeats"]):
            folder = os.path.join(workdir, "evaluation", f"{mode}-{repeat}")
            bare = launch([mode], profile, seconds, os.path.join(folder, "none"), snapshot_seconds=0)[mode]
            evaluated = launch([mode], profile, seconds, os.path.join(folder, "snapshots"))[mode]
            runs.append({"mode": mode, "profile": profile, "repeat": repeat,
                         "samples_per_s_without": bare["cluster_throughput"],
                         "samples_per_s_with": evaluated["cluster_throughput"],
                         "ratio": evaluated["cluster_throughput"] / bare["cluster_throughput"],
                         "snapshots": (evaluated.get("evaluator") or {}).get("num_checkpoints"),
                         "final_accuracy": evaluated["final_accuracy"]})
            log.info("%s on %s: %.2f of the samples/s without evaluation", mode, profile, runs[-1]["ratio"])
    costs = [snapshot_cost(network, steps) for network, steps in cfg["snapshot_networks"].items()]
    return {"runs": runs, "snapshot_costs": costs, "snapshot_seconds": DEFAULT_SNAPSHOT_SECONDS}


def markdown(results):
    section = results["evaluation"]
    run_rows = [[r["mode"], r["profile"], str(r["repeat"] + 1), f"{r['samples_per_s_without']:.0f}",
                 f"{r['samples_per_s_with']:.0f}", f"{r['ratio']:.2f}", fmt(r["snapshots"], "d"),
                 fmt(r["final_accuracy"], ".3f")] for r in section["runs"]]
    period = section["snapshot_seconds"]
    cost_rows = [[c["network"], f"{c['param_bytes'] / 1e6:.1f}", f"{1e3 * c['step_seconds']:.1f}",
                  f"{1e3 * c['snapshot_seconds']:.2f}", f"{c['share_of_step']:.1%}",
                  f"{c['snapshot_seconds'] / max(period, c['step_seconds']):.2%}",
                  f"{1e3 * c['writer_seconds']:.1f}"] for c in section["snapshot_costs"]]
    ratios = {}
    for r in section["runs"]:
        ratios.setdefault(r["mode"], []).append(r["ratio"])
    spread = "; ".join(f"{mode} {statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"
                       for mode, values in ratios.items())
    return [f"### Evaluation off the training path (lenet, mnist-5k): snapshots every "
            f"{section['snapshot_seconds']:g} s and the evaluator process, against no evaluation", "",
            "Each pair of runs one after the other; ratio = samples/s with the evaluator over samples/s without it, "
            f"median (lowest–highest) over the pairs: {spread}.", "",
            markdown_table(["mode", "profile", "repeat", "samples/s, no evaluation", "samples/s, evaluator",
                            "ratio", "snapshots", "final accuracy"], run_rows), "",
            "One snapshot on rank 0's training thread, right after a step, timed to the end of its copies (one compute "
            "thread; medians); its share of a step, and of rank 0's time at one snapshot per period; what the writer "
            "thread then spends saving it:", "",
            markdown_table(["network", "MB", "step (ms)", "snapshot (ms)", "of a step",
                            f"of the time, every {period:g} s", "writer (ms)"], cost_rows), ""]
