"""Table 1 of the ESync paper from the logs of repeated runs: per network and data split, each mode's time to the
target accuracy, its speedup against SSGD, samples/s, traffic and final accuracy as mean ± stddev over the
repeats, beside the standalone baseline (sequential SGD on one fast device).

The runs lie at <log-dir>/repeat-<r>/<network>/<mode>[-niid]/ with their summary JSON (launch.py paper writes
them), ESync's further configurations (`esync-<variant>` rows, training/esync_variants.py) at
<log-dir>/repeat-<r>/esync-<variant>/<network>/esync[-niid]/; the standalone baseline runs once per repeat, on
i.i.d. data, and serves both splits. A ratio between two
modes (a speedup, a throughput or traffic ratio) is taken within each repeat, whose runs share a seed, and then
averaged over the repeats. A repeat whose run never reached the target counts with a lower bound (its training
time, or its budget where it stopped as diverged; for a speedup, that bound of SSGD's over the mode's time), and a
mean over such repeats is shown as a lower bound ("≥"). Final accuracies are compared with sequential SGD's only
in the repeats where both curves had levelled off (metrics.plateau); with SSGD's (the paper's claim on non-i.i.d.
data) after the same training time, in every repeat. Whether ESync's lead over a rival holds beyond the repeats'
spread is an exact permutation test, of the times (a repeat that never reached the target counted at the budget) and
of the accuracies (analysis/significance.py).
"""
import glob
import os
import re
import statistics

from analysis import metrics, significance
from coordination.rules import apply as paper_rule
from analysis import summary as summaries
from training import esync_variants, modes, runlog

PAPER_TARGET = 0.8          # the paper's speedup is the ratio of the times to reach test accuracy 0.8
PAPER_DATASET = "fashion-mnist"  # the paper's data (Debian: apt-get install dataset-fashion-mnist)
SPLITS = ("iid", "niid")
SPLIT_NAMES = {"iid": "i.i.d.", "niid": "non-i.i.d."}
REPEAT_FOLDER = "repeat-{}"
BASELINE = "sync"           # speedups are against SSGD, as in the paper
TRAFFIC_BASELINE = "async"  # the paper compares ESync's traffic with ASGD's
FAST_ONLY = "fast-only"     # the row of SSGD on the profile's fastest devices alone: the stragglers dropped
# The rows ESync's time to the target is tested against: the paper's claims (SSGD, ASGD and DC-ASGD reach it later),
# and whether the cluster pays at all (one fast device, the fast devices alone).
LATER_RIVALS = {BASELINE: "SSGD", TRAFFIC_BASELINE: "ASGD", "dcasgd": "DC-ASGD", modes.STANDALONE: "one fast device",
                FAST_ONLY: "SSGD on the fast devices alone"}
# The paper's own figures (i.i.d. Fashion-MNIST, 4 GTX 1080Ti and 2 E5-2650v4 CPUs): Table 1's speedup over SSGD to
# 0.8 per network, and Figure 4's samples/s and traffic, which it gives for its cluster as a whole.
PAPER_SPEEDUPS = {"alexnet": 27, "inception-v3": 7, "resnet18-v1": 7, "resnet50-v1": 4, "resnet50-v2": 6,
                  "mobilenet-v1": 2}
PAPER_FIGURE_4 = {"samples_per_s_vs_ssgd": 33, "samples_per_s_vs_asgd": 13, "traffic_vs_asgd": 0.25}
TABLE_FILE = "table1.md"
RESULTS_FILE = "paper.json"
# (key, column title, format) of Table 1's cells, in order.
COLUMNS = (
    ("time_to_target", "time to {target:g} (s)", ".1f"),
    ("speedup", "speedup vs SSGD", ".1f"),
    ("samples_per_s", "samples/s", ".0f"),
    ("applied_samples_per_s", "applied samples/s", ".0f"),
    ("traffic_mb_per_s", "traffic (MB/s)", ".2f"),
    ("final_accuracy", "final accuracy", ".3f"),
    ("levelled", "levelled off", ""),
)


class PaperError(Exception):
    """The logs cannot give the table: a folder or summary is missing."""


def repeat_dir(log_dir, repeat):
    return os.path.join(log_dir, REPEAT_FOLDER.format(repeat))


def repeats_in(log_dir):
    """The repeat numbers whose folders an earlier run left under log_dir, in order."""
    found = [re.fullmatch(REPEAT_FOLDER.format(r"(\d+)"), os.path.basename(p))
             for p in glob.glob(os.path.join(log_dir, REPEAT_FOLDER.format("*")))]
    return sorted(int(m.group(1)) for m in found if m)


def folder_of(mode, split):
    return runlog.run_folder(mode, non_iid=split == "niid")


def variant_of(row):
    """The ESync variant a Table 1 row names ('esync-adaptive-drift' -> 'adaptive-drift'), None for a mode."""
    return row[len(esync_variants.PREFIX):] if row.startswith(esync_variants.PREFIX) and row not in modes.MODES \
        else None


def variant_dir(log_dir, repeat, variant):
    """Where the launcher runs of one ESync variant log in a repeat (their own log folder: each is its own run)."""
    return os.path.join(repeat_dir(log_dir, repeat), esync_variants.PREFIX + variant)


def fast_only_dir(log_dir, repeat):
    """Where the launcher runs of SSGD on the fastest devices alone log in a repeat."""
    return os.path.join(repeat_dir(log_dir, repeat), FAST_ONLY)


def is_esync(row):
    return row == modes.ESYNC or variant_of(row) is not None


def display(row, esync_policy=None):
    """A row's name in the tables and figures: ESync with its policy ('the paper's rule' for apply) or its
    variant, every other mode by its catalog name."""
    if row == FAST_ONLY:
        return "SSGD, fast devices alone"
    variant = variant_of(row)
    if variant is not None:
        return f"ESync ({esync_variants.describe(variant)})"
    if row == modes.ESYNC and esync_policy:
        return "ESync (the paper's rule)" if esync_policy == paper_rule.NAME else f"ESync ({esync_policy})"
    return modes.MODES[row].display if row in modes.MODES else row


# ----------------------------------------------------------------------------------------------
# Reading the repeats


def load_grid(log_dir, network, cluster_modes, repeats, splits=SPLITS, budget=None):
    """{split: {row: [summary of each repeat, with the runs' `budget`, their --max-time]}}, the standalone mode (which
    runs with the first split) under every split; `cluster_modes` may hold ESync variants' rows; PaperError when a
    run's summary is missing."""
    def read(network_dir, folder):
        return {**read_summary(network_dir, folder), "budget": budget}

    baseline = modes.STANDALONE
    grid = {split: {mode: [] for mode in cluster_modes + (baseline,)} for split in splits}
    for repeat in repeats:
        network_dir = os.path.join(repeat_dir(log_dir, repeat), network)
        for split in splits:
            for mode in cluster_modes:
                variant = variant_of(mode)
                if mode == FAST_ONLY:
                    grid[split][mode].append(read(os.path.join(fast_only_dir(log_dir, repeat), network),
                                                  folder_of("sync", split)))
                elif variant is None:
                    grid[split][mode].append(read(network_dir, folder_of(mode, split)))
                else:
                    grid[split][mode].append(read(os.path.join(variant_dir(log_dir, repeat, variant), network),
                                                  folder_of("esync", split)))
        standalone = read(network_dir, folder_of(baseline, splits[0]))
        for split in splits:
            grid[split][baseline].append(standalone)
    return grid


def read_summary(network_dir, folder):
    found = summaries.load_summary(network_dir, folder)
    if found is None:
        raise PaperError(f"no summary of {os.path.join(network_dir, folder)}: that run did not finish")
    return found


# ----------------------------------------------------------------------------------------------
# Per-repeat numbers and their statistics


def time_to_target(run, target):
    return metrics.time_to_reach(metrics.curve_points(run), target)


def rounds_to_target(run, target):
    """The global iteration at which a run's curve first reached `target` (for one device alone, its steps); None
    where it never did."""
    return next((iteration for iteration, _, accuracy in metrics.curve_points(run) if accuracy >= target), None)


def per_repeat(runs_by_mode, mode, target):
    """{key: [value of each repeat or None]} of one mode; ratios are against the same repeat's baselines. `*_bound`
    lists hold, where a repeat never got there, a lower bound of its value."""
    runs = runs_by_mode[mode]
    times = [time_to_target(run, target) for run in runs]
    values = {
        "time_to_target": times,
        "time_to_target_bound": [miss_bound(run) if t is None else None for run, t in zip(runs, times)],
        "samples_per_s": [run.get("cluster_throughput") for run in runs],
        # what reached the model: a backup worker's dropped steps and Zeno's rejected updates left out
        "applied_samples_per_s": [run.get("applied_throughput") for run in runs],
        "traffic_mb_per_s": [run.get("traffic_mb_per_s") for run in runs],
        "final_accuracy": [run.get("final_accuracy") for run in runs],
        "plateau": [metrics.plateau(metrics.curve_points(run)) for run in runs],
    }
    if BASELINE in runs_by_mode:
        baselines = runs_by_mode[BASELINE]
        baseline_times = [time_to_target(run, target) for run in baselines]
        values["speedup"] = [ratio(base, own) for base, own in zip(baseline_times, times)]
        values["speedup_bound"] = [ratio(miss_bound(run), own) if base is None else None
                                   for run, base, own in zip(baselines, baseline_times, times)]
    return values


def miss_bound(run):
    """A lower bound of the time to a target the run never reached: its training time; where it stopped as diverged
    (training on would not have reached it), its budget."""
    elapsed = run.get("elapsed_time")
    if run.get("diverged") and run.get("budget") is not None:
        return max(elapsed or 0.0, run["budget"])
    return elapsed


def with_lower_bounds(values, bounds):
    """statistics_of the repeats, where a repeat without a value counts with its lower bound from `bounds` (None
    where it has none): the mean is then itself a lower bound, marked `lower_bound`."""
    return {**statistics_of(fill(values, bounds)),
            "lower_bound": any(value is None and bound is not None for value, bound in zip(values, bounds))}


def levelled_count(plateaus):
    return {"levelled": sum(p["levelled"] for p in plateaus), "of": len(plateaus)}


def ratio(numerator, denominator):
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def statistics_of(values):
    """{mean, std, n, values}: the mean and sample stddev of the repeats that have a value (std None below 2)."""
    known = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(known) if known else None,
        "std": statistics.stdev(known) if len(known) >= 2 else None,
        "n": len(known),
        "values": list(values),
    }


def times_to_thresholds(runs_by_mode, thresholds):
    """{mode: {threshold: statistics of each repeat's time to it}} (NBSSGD's measure: several accuracies, the
    repeats' mean and spread)."""
    return {mode: {f"{threshold:g}": statistics_of([time_to_target(run, threshold) for run in runs])
                   for threshold in thresholds}
            for mode, runs in runs_by_mode.items()}


def cells(runs_by_mode, target):
    """{mode: {key: statistics}} of one split."""
    table = {}
    for mode in runs_by_mode:
        values = per_repeat(runs_by_mode, mode, target)
        table[mode] = {key: statistics_of(values[key])
                       for key in ("samples_per_s", "applied_samples_per_s", "traffic_mb_per_s", "final_accuracy")}
        table[mode]["time_to_target"] = {**with_lower_bounds(values["time_to_target"], values["time_to_target_bound"]),
                                          "reached": sum(t is not None for t in values["time_to_target"]),
                                          "diverged": sum(1 for run in runs_by_mode[mode] if run.get("diverged"))}
        table[mode]["levelled"] = levelled_count(values["plateau"])
        if "speedup" in values:
            table[mode]["speedup"] = with_lower_bounds(values["speedup"], values["speedup_bound"])
    return table


def headline(runs_by_mode, target, esync="esync"):
    """The paper's claims for ESync (the row `esync`: the mode, or one of its variants) in one split, each as statistics over the repeats (None where a mode is
    missing): speedup to the target and samples/s against SSGD, traffic against ASGD, final accuracy minus
    sequential SGD's where both had levelled off, and whether ASGD and DC-ASGD reached the target later."""
    if esync not in runs_by_mode:
        return {}
    own = per_repeat(runs_by_mode, esync, target)
    claims = {}
    if BASELINE in runs_by_mode:
        base = per_repeat(runs_by_mode, BASELINE, target)
        claims["speedup_vs_ssgd"] = with_lower_bounds(own["speedup"], own["speedup_bound"])
        claims["samples_per_s_vs_ssgd"] = statistics_of(paired(ratio, own["samples_per_s"], base["samples_per_s"]))
        claims["accuracy_vs_ssgd"] = accuracy_against(own["final_accuracy"], base["final_accuracy"])
    if TRAFFIC_BASELINE in runs_by_mode:
        base = per_repeat(runs_by_mode, TRAFFIC_BASELINE, target)
        claims["traffic_vs_asgd"] = statistics_of(paired(ratio, own["traffic_mb_per_s"], base["traffic_mb_per_s"]))
        claims["samples_per_s_vs_asgd"] = statistics_of(paired(ratio, own["samples_per_s"], base["samples_per_s"]))
    claims.update(accuracy_claim(own["plateau"], per_repeat(runs_by_mode, modes.STANDALONE, target)["plateau"]))
    for rival in LATER_RIVALS:
        if rival in runs_by_mode:
            claims[f"{rival}_later"] = later_than(per_repeat(runs_by_mode, rival, target), own)
    return claims


def accuracy_claim(own, sequential):
    """ESync's accuracy minus sequential SGD's, each the mean of its curve's last quarter, in the repeats where both
    curves had levelled off; and how many those were."""
    both = [(o, s) for o, s in zip(own, sequential) if o["levelled"] and s["levelled"]]
    return {"accuracy_minus_sequential": statistics_of([o["accuracy"] - s["accuracy"] for o, s in both]),
            "accuracy_compared": {"levelled": len(both), "of": len(own)}}


def accuracy_against(own, other):
    """The paper's claim on non-i.i.d. data, ESync faster than SSGD "without loss of accuracy": ESync's final
    accuracy minus SSGD's after the same training time, repeat by repeat, the permutation p-value between the two
    modes' final accuracies and whose lead it supports ("esync", "rival", or None for a tie within the spread)."""
    own_known, other_known = ([a for a in values if a is not None] for values in (own, other))
    return {"difference": statistics_of(paired(difference, own, other)),
            "p_value": significance.p_value(own_known, other_known),
            "holds": lead_of(own_known, other_known, significance.exceeds)}


def lead_of(own, rival, ahead):
    """Whose lead holds beyond the repeats' spread: "esync" or "rival", whichever is `ahead` of the other
    (significance.leads for times, exceeds for accuracies); None for a tie."""
    return "esync" if ahead(own, rival) else "rival" if ahead(rival, own) else None


def later_than(rival, own):
    """{later, of, p_value, holds}: in how many repeats the rival reached the target after ESync (or never, where
    ESync did), of the repeats in which either reached it; the permutation p-value between the two modes' times (a
    repeat that never reached counted at its training time, the longest a run of the two trained) and which mode's lead it supports ("esync", "rival", or
    None for a tie within the spread)."""
    decided = [(r, o) for r, o in zip(rival["time_to_target"], own["time_to_target"]) if (r, o) != (None, None)]
    later = sum(1 for r, o in decided if o is not None and (r is None or r > o))
    own_times, rival_times = (significance.censored_times(m["time_to_target"], m["time_to_target_bound"])
                              for m in (own, rival))
    return {"later": later, "of": len(decided), "p_value": significance.p_value(own_times, rival_times),
            "holds": lead_of(own_times, rival_times, significance.leads)}


def fill(values, bounds):
    return [bound if value is None else value for value, bound in zip(values, bounds)]


def paired(function, values, others):
    return [function(v, o) for v, o in zip(values, others)]


def difference(value, other):
    return None if value is None or other is None else value - other


# ----------------------------------------------------------------------------------------------
# The table


def format_statistic(stat, spec, unit=""):
    """'mean ± std', with the number of repeats that have a value when some lack one; '≥ mean' where some repeats
    gave only a lower bound, with how many repeats reached the target for a time; 'k of n' for a count of
    levelled-off curves."""
    if "levelled" in stat:
        return f"{stat['levelled']} of {stat['of']}"
    if stat["mean"] is None:
        return "-"
    text = format(stat["mean"], spec)
    if stat.get("lower_bound"):
        text = "≥ " + text
    elif stat["std"] is not None:
        text += f" ± {stat['std']:{spec.replace('+', '')}}"
    missing = len(stat["values"]) - stat["n"]
    text += unit + (f" ({stat['n']} of {len(stat['values'])} repeats)" if missing else "")
    if "reached" in stat and stat["reached"] < len(stat["values"]):
        diverged = f", {stat['diverged']} diverged" if stat.get("diverged") else ""
        text += f" ({stat['reached']} of {len(stat['values'])} reached{diverged})"
    return text


def links_of(grid, cluster_modes, key="links"):
    """The distinct links the cluster modes' runs recorded (one, unless runs of the grid had different ones); with
    key="device_emulation", how their devices were emulated."""
    found = [run.get(key) for runs_by_mode in grid.values() for mode in cluster_modes for run in runs_by_mode[mode]]
    return sorted({links for links in found if links})


def build_report(log_dir, network, cluster_modes, repeats, target, description, thresholds=(), splits=SPLITS):
    """Table 1's numbers for one network as a dict (written to paper.json), and the time to each of `thresholds`;
    `description` names the job."""
    grid = load_grid(log_dir, network, tuple(cluster_modes), repeats, tuple(splits), description.get("max_time"))
    return {
        **description,
        "splits": list(splits),
        "links": links_of(grid, cluster_modes),
        "devices": links_of(grid, list(cluster_modes) + [modes.STANDALONE], "device_emulation"),
        "network": network,
        "target": target,
        "repeats": list(repeats),
        "names": {row: display(row, description.get("esync_policy")) for row in tuple(cluster_modes) + (modes.STANDALONE,)},
        "cells": {split: cells(grid[split], target) for split in splits},
        "headline": {split: {row: headline(grid[split], target, row) for row in cluster_modes if is_esync(row)}
                     for split in splits},
        "thresholds": {split: times_to_thresholds(grid[split], thresholds) for split in splits} if thresholds else {},
    }, grid
