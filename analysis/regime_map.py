"""Which scheme wins where: the runs of `launch.py regimes` read back into one map.

The grid is links (loopback, or links shaped to a communication ratio R) x heterogeneity profiles x data splits,
with repeats; each scheme runs once per cell and repeat, one launcher run each, logging under

    <log-dir>/<link>/<profile>/<split>/repeat-<r>/<scheme>/<network>/<mode>[-niid]/

beside a STATUS_FILE with the launcher's exit code. Per cell and scheme: the time to the target accuracy (mean ±
stddev over the repeats that reached it, and how many did), samples/s, efficiency against the concurrent
standalone limit of the profile, bytes through the workers' links per trained sample, final accuracy, and how many
repeats diverged. A cell's leader is the scheme with the lowest mean time to the target, a repeat that missed it
(out of time, or diverged) counted at the budget; it wins where its lead over every other scheme holds by an exact
permutation test, Holm-corrected for choosing it (analysis/significance.py). Every other scheme's time is given
relative to the leader's. A run that failed shows as failed, one that never reached the target as never, not as
zero.
"""
import glob
import os
import statistics

from analysis import summary as summaries
from analysis import significance
from analysis import timing, tuned
from analysis.tuned import compact
from analysis.paper import format_statistic, rounds_to_target, statistics_of, time_to_target
from analysis.scheme_names import STANDALONE, display, mode_of
from analysis.tables import markdown_table
from training import runlog
from training.files import read_json, write_json, write_text

PLAN_FILE = "regimes-plan.json"     # the grid, written before the first run: --report-only reads it
LIMITS_FILE = "limits.json"         # {profile: [each worker's concurrent standalone samples/s]}
STATUS_FILE = "status.json"         # in each run's folder: {"exit_code": the launcher's}
RESULTS_FILE = "regimes.json"
TABLE_FILE = "regimes.md"
DECLARATION_FILE = "declared.json"  # a study's, written before it ran (launcher/studies/registry.py)
LOOPBACK = tuned.LOOPBACK
SPLIT_NAMES = {"iid": "i.i.d.", "niid": "non-i.i.d."}


class RegimeMapError(Exception):
    """The logs cannot give the map (no plan file); the message is one line."""


# ----------------------------------------------------------------------------------------------
# Names and folders


def link_folder(link):
    return LOOPBACK if link == LOOPBACK else f"R{link:g}"


def describe_link(link):
    return LOOPBACK if link == LOOPBACK else f"R = {link:g}"


def profile_folder(profile):
    return compact(profile).replace(",", "-")


def run_dir(log_dir, link, profile, split, repeat, scheme):
    return os.path.join(log_dir, link_folder(link), profile_folder(profile), split, f"repeat-{repeat}", scheme)


# ----------------------------------------------------------------------------------------------
# Reading the runs


def read_run(log_dir, plan, link, profile, split, repeat, scheme):
    """{status: ok | failed | not run, summary: the mode's summary or None}."""
    folder = run_dir(log_dir, link, profile, split, repeat, scheme)
    mode, _ = mode_of(scheme)
    found = summaries.load_summary(os.path.join(folder, plan["network"]), runlog.run_folder(mode,
                                                                                             non_iid=split == "niid"))
    status_path = os.path.join(folder, STATUS_FILE)
    code = (runlog.read_json(status_path, "run status") or {}).get("exit_code") if os.path.exists(status_path) else None
    if found is not None and code in (0, None):
        return {"status": "ok", "summary": found}
    return {"status": "not run" if code is None else "failed", "summary": None}


def repeat_time(run, target, budget=None):
    """A run's [seconds, reached] (significance.censored_times'), None where it failed or did not run."""
    if run["status"] != "ok":
        return None
    found = significance.censored_times([time_to_target(run["summary"], target)],
                                        [run["summary"].get("elapsed_time")], budget)
    return found[0] if found else None


def cell_of_scheme(runs, limit, target, budget=None):
    """The numbers of one scheme in one cell from its repeats' runs."""
    done = [run["summary"] for run in runs if run["status"] == "ok"]
    times = [time_to_target(s, target) for s in done]
    speeds = [s.get("cluster_throughput") for s in done]
    return {
        "repeats": len(runs),
        "censored_times": significance.censored_times(times, [s.get("elapsed_time") for s in done], budget),
        "times_by_repeat": [repeat_time(run, target, budget) for run in runs],  # the paired test's, by seed
        "failed": sum(run["status"] == "failed" for run in runs),
        "not_run": sum(run["status"] == "not run" for run in runs),
        "reached": sum(t is not None for t in times),
        "diverged": sum(1 for s in done if s.get("diverged")),
        "time_to_target": statistics_of(times),
        "rounds_to_target": statistics_of([rounds_to_target(s, target) for s in done]),
        "samples_per_s": statistics_of(speeds),
        "efficiency": statistics_of([v / limit if v is not None and limit else None for v in speeds]),
        "bytes_per_sample": statistics_of([bytes_per_sample(s) for s in done]),
        "final_accuracy": statistics_of([s.get("final_accuracy") for s in done]),
        "final_accuracies": [s["final_accuracy"] for s in done if s.get("final_accuracy") is not None],
        "fast_compute_ms": statistics_of([1e3 * s["fast_compute_seconds"] if s.get("fast_compute_seconds") else None
                                          for s in done]),
        "fast_compute_over_probe": statistics_of([compute_over_probe(s) for s in done]),
        "fast_local_step_ms": statistics_of([1e3 * s["fast_local_step_seconds"] if s.get("fast_local_step_seconds")
                                             else None for s in done]),
        "links": sorted({s["links"] for s in done if s.get("links")}),
        "servers": sorted({s["clock"]["num_servers"] for s in done if "num_servers" in (s.get("clock") or {})}),
        "sums": sorted({s["clock"]["sums"] for s in done if "sums" in (s.get("clock") or {})}),
        "device_samples_per_s": per_device_throughput(done),
        "staleness_median": statistics_of([(s.get("staleness") or {}).get("median") for s in done]),
        "staleness_p90": statistics_of([(s.get("staleness") or {}).get("p90") for s in done]),
    }


def per_device_throughput(summaries):
    """{device folder: the statistics of its samples/s over the runs}, the devices in their order."""
    found = {}
    for s in summaries:
        for node in s.get("devices", {}).values():
            for device, stats in node.items():
                found.setdefault(device, []).append(stats.get("throughput"))
    return {device: statistics_of(values) for device, values in sorted(found.items())}


def compute_over_probe(run):
    """The fast devices' median forward and backward pass in the run over the probe's alone: 1 where the run met
    the regime its links were set for."""
    run_step, probe_step = run.get("fast_compute_seconds"), run.get("probe_compute_seconds")
    return run_step / probe_step if run_step and probe_step else None


def bytes_per_sample(run):
    traffic, speed = run.get("traffic_mb_per_s"), run.get("cluster_throughput")
    return traffic * 1e6 / speed if traffic is not None and speed else None


def rank(cell):
    """{scheme: relative time} and the leader of one cell: the lowest restricted mean time to the target (a repeat
    that missed counts at the horizon, the longest any run in the cell trained); a scheme that never reached it has
    no relative time."""
    means = restricted_means(cell)
    reaching = {scheme: means[scheme] for scheme, c in cell.items() if c["reached"]}
    if not reaching:
        return None, {}
    leader = min(reaching, key=reaching.get)
    return leader, {scheme: mean / reaching[leader] for scheme, mean in reaching.items()}


def restricted_means(cell):
    """{scheme: its mean time to the target, each miss at the cell's horizon}."""
    runs = [t for c in cell.values() for t, _ in c["censored_times"]]
    if not runs:
        return {}
    horizon = max(runs)
    return {scheme: statistics.fmean(t if reached else horizon for t, reached in c["censored_times"])
            for scheme, c in cell.items() if c["censored_times"]}


def decide(leader, cell):
    """{winner, tied, p_values} of a cell: the leader wins where its lead holds beyond the repeats' spread."""
    if leader is None:
        return {"winner": None, "tied": [], "p_values": {}}
    times = {scheme: numbers["censored_times"] for scheme, numbers in cell.items() if numbers["censored_times"]}
    return significance.verdict(leader, times)


def build(log_dir):
    """The map as a dict (written to regimes.json) from the plan and the runs under log_dir."""
    plan_path = os.path.join(log_dir, PLAN_FILE)
    if not os.path.exists(plan_path):
        raise RegimeMapError(f"no {PLAN_FILE} under {log_dir}: run `launch.py regimes` there first")
    plan = runlog.read_json(plan_path, "regime map plan")
    if not isinstance(plan, dict):
        raise RegimeMapError(f"{plan_path} is not a regime map plan")
    limits_path = os.path.join(log_dir, LIMITS_FILE)
    limits = (runlog.read_json(limits_path, "standalone limits") or {}) if os.path.exists(limits_path) else {}
    cells = []
    for split in plan["splits"]:
        for profile in plan["profiles"]:
            limit = sum(limits[profile]) if limits.get(profile) else None
            for link in plan["links"]:
                runs = {scheme: [read_run(log_dir, plan, link, profile, split, r, scheme)
                                 for r in range(1, plan["repeats"] + 1)] for scheme in plan["schemes"]}
                first, *higher = targets_of(plan)
                cells.append({"split": split, "profile": profile, "link": link, "limit_samples_per_s": limit,
                              **cell_at(runs, limit, first, plan["max_time"]),
                              "at_higher_targets": {f"{t:g}": cell_at(runs, limit, t, plan["max_time"])
                                                    for t in higher}})
    return {**plan, **timing.read(log_dir), "cells": cells}


def targets_of(plan):
    """The accuracies the map times the schemes to: the first is the map's target, the others its higher targets."""
    return plan.get("targets") or [plan["target"]]


def cell_at(runs, limit, target, budget=None):
    """{leader, winner, tied, p_values, schemes} of one cell timed to `target`."""
    cell = {scheme: cell_of_scheme(repeats, limit, target, budget) for scheme, repeats in runs.items()}
    leader, relative = rank(cell)
    for scheme, numbers in cell.items():
        numbers["relative_time"] = relative.get(scheme)
    pays, pays_test = cluster_pays(cell)
    return {"leader": leader, **decide(leader, cell), "cluster_pays": pays, "cluster_pays_test": pays_test,
            "one_device_over_best": one_device_over_best(cell), "test": power_of(cell), "schemes": cell}


def one_device_over_best(cell):
    """One fast device's median time over the cluster scheme with the lowest mean time's, with its bootstrap
    interval (significance.ratio_interval): above 1 the cluster pays by that much; and which scheme. None without
    the device alone or a cluster scheme that ran."""
    alone = cell.get(STANDALONE)
    others = {s: n["censored_times"] for s, n in cell.items() if s != STANDALONE and n["censored_times"]}
    if alone is None or not alone["censored_times"] or not others:
        return None
    best = min(others, key=lambda s: significance.location(significance.compared_values(others[s],
                                                                                          alone["censored_times"])[0]))
    found = significance.ratio_interval(alone["censored_times"], others[best])
    return None if found is None else {"scheme": best, **found}


def power_of(cell):
    """{repeats, floor, log_spread, detectable_ratio}: the smallest p-value the cell's repeats allow, the spread of
    the schemes' log times to the target (pooled over the schemes with two or more), and the ratio of times that
    many repeats detect at it."""
    repeats = min((len(n["censored_times"]) for n in cell.values() if n["censored_times"]), default=0)
    spread = significance.pooled_log_spread([[t for t, reached in n["censored_times"] if reached]
                                             for n in cell.values()])
    return {"repeats": repeats, "floor": significance.floor(repeats, repeats), "log_spread": spread,
            "detectable_ratio": significance.detectable_ratio(repeats, spread) if repeats else None}


def cluster_pays(cell):
    """Whether the cluster pays in a cell with one fast device alone (`local`) beside the cluster's schemes, by the
    device's times against each cluster scheme's, Holm-corrected over them: "yes" where a cluster scheme reaches the
    target sooner beyond the spread, "no" where the device leads every one of them, else "cannot be told" (None
    without the device alone); and the test behind it (significance.against_each)."""
    alone = cell.get(STANDALONE)
    others = {s: n["censored_times"] for s, n in cell.items() if s != STANDALONE and n["censored_times"]}
    if alone is None or not alone["censored_times"] or not others:
        return None, None
    judged = significance.against_each(alone["censored_times"], others)
    if judged["faster"]:
        return "yes", judged
    return ("no" if len(judged["slower"]) == len(others) else "cannot be told"), judged


def at_target(result, target):
    """The map as if it were timed to one of its higher targets alone (its tables and heatmaps read it so)."""
    key = f"{target:g}"
    return {**result, "target": target,
            "cells": [{**cell, **cell["at_higher_targets"][key]} for cell in result["cells"]]}


# ----------------------------------------------------------------------------------------------
# The tables


def outcome(numbers):
    """A scheme's time in a cell as text: 'mean ± std s', with how many repeats reached it, or why none did."""
    if numbers["reached"]:
        diverged = f"; {numbers['diverged']} diverged" if numbers.get("diverged") else ""
        return format_statistic(numbers["time_to_target"], ".1f", " s") + diverged
    if numbers["failed"]:
        return f"failed ({numbers['failed']} of {numbers['repeats']})"
    return "not run" if numbers["not_run"] == numbers["repeats"] else "never"


def winner_table(result, split):
    """Rows: profiles; columns: links; each entry the winner, its time and the runner-up's relative time, or the
    schemes that tie."""
    rows = []
    for profile in result["profiles"]:
        row = [compact(profile)]
        for link in result["links"]:
            cell = find_cell(result, split, profile, link)
            entry = nobody_reached(cell) if cell["leader"] is None else cell_entry(cell)
            pays = cell.get("cluster_pays")
            row.append(entry + (f"; the cluster pays: **{pays}**" if pays else ""))
        rows.append(row)
    return markdown_table(["workers"] + [describe_link(link) for link in result["links"]], rows)


def cell_entry(cell):
    leader = cell["leader"]
    entry = f"**{display(leader)}** {outcome(cell['schemes'][leader])}"
    if cell["winner"] is None:
        others = [f"{display(s)} {relative_text(cell['schemes'][s], none='never', prefix='×')}"
                  for s in cell["tied"][1:]]
        return f"tie: {entry}, " + ", ".join(others)
    others = sorted((n["relative_time"], s) for s, n in cell["schemes"].items()
                    if n["relative_time"] is not None and s != leader)
    return entry + (f"; next {display(others[0][1])} ×{others[0][0]:.2f}" if others else "")


def relative_text(numbers, none="-", prefix=""):
    return none if numbers["relative_time"] is None else f"{prefix}{numbers['relative_time']:.2f}"


def nobody_reached(cell):
    """A cell where no scheme reached the target: which one came closest, by its final accuracy, where its lead
    holds beyond the repeats' spread (the same test as the times'), or the schemes that tie with it."""
    if all(n["not_run"] == n["repeats"] for n in cell["schemes"].values()):
        return "not run"
    finals = {s: n["final_accuracies"] for s, n in cell["schemes"].items() if n["final_accuracies"]}
    if not finals:
        return "none reached the target"
    closest = max(finals, key=lambda s: statistics.fmean(finals[s]))
    lower_is_better = {s: [-a for a in accuracies] for s, accuracies in finals.items()}
    tied = sorted(significance.verdict(closest, lower_is_better)["tied"], key=lambda s: -statistics.fmean(finals[s]))
    if len(tied) == 1:
        return f"none reached the target; closest **{display(closest)}** at {final_text(cell, closest)}"
    return "none reached the target; closest, a tie: " + ", ".join(f"{display(s)} at {final_text(cell, s)}"
                                                                 for s in tied)


def final_text(cell, scheme):
    return format_statistic(cell["schemes"][scheme]["final_accuracy"], ".3f")


def detail_table(result, split):
    headers = ["workers", "links", "scheme", f"time to {result['target']:g}", "× winner", "samples/s",
               "efficiency", "bytes/sample", "final accuracy", "fast step (ms)", "step / probe's"]
    rows = []
    for profile in result["profiles"]:
        for link in result["links"]:
            for scheme, n in by_relative_time(find_cell(result, split, profile, link)):
                rows.append([compact(profile), describe_link(link), display(scheme), outcome(n), relative_text(n),
                             format_statistic(n["samples_per_s"], ".0f"), format_statistic(n["efficiency"], ".2f"),
                             format_statistic(n["bytes_per_sample"], ".0f"),
                             format_statistic(n["final_accuracy"], ".3f"),
                             format_statistic(n["fast_compute_ms"], ".1f"),
                             format_statistic(n["fast_compute_over_probe"], ".2f")])
    return markdown_table(headers, rows)


def target_table(result, split):
    """Each scheme's time to the result's target and relative time, cell by cell."""
    rows = []
    for profile in result["profiles"]:
        for link in result["links"]:
            rows += [[compact(profile), describe_link(link), display(scheme), outcome(n), relative_text(n)]
                     for scheme, n in by_relative_time(find_cell(result, split, profile, link))]
    return markdown_table(["workers", "links", "scheme", f"time to {result['target']:g}", "× leader"], rows)


def by_relative_time(cell):
    """(scheme, numbers) of a cell, the leader first, those that never reached the target last."""
    return sorted(cell["schemes"].items(), key=lambda item: (item[1]["relative_time"] is None,
                                                             item[1]["relative_time"] or 0))


def cell_name(result, cell, clock=True):
    """The cell as the tables name it; with `clock`, whether it ran on the virtual clock or in real time."""
    link = describe_link(cell["link"])
    timed = ", virtual clock" if result.get("clock") == runlog.VIRTUAL_CLOCK else ", real time"
    return (f"{result['network']}, {result['dataset']}, {compact(cell['profile'])}, {link}, "
            f"{SPLIT_NAMES[cell['split']]}{timed if clock else ''}")


def cells_at_targets(result):
    """(target, cell) of every cell, at the map's target and at each higher one."""
    for target in targets_of(result):
        timed = result if target == result["target"] else at_target(result, target)
        for cell in timed["cells"]:
            yield target, cell


def horizon_of(cell):
    """The latest capped time any scheme of the cell recorded."""
    return max((t for n in cell["schemes"].values() for t, _ in n["censored_times"]), default=0.0)


def map_studies(results):
    """The folders under `results` that hold a map (RESULTS_FILE), in the map's order: the virtual clock before real
    time, fewer devices first, then the paper's shape (devices 117x slower) first, fewer distinct speeds, the slowest
    device's factor, the split; last, a study declared before it ran (declared.json) after those that were not, so
    that where both ran a cell, the declared one's comes last and stands (the tables keep a cell's last)."""
    def order(folder):
        result = read_json(os.path.join(folder, RESULTS_FILE))
        factors = [float(f) for f in result["profiles"][0].split(",")]
        return (result.get("clock") != runlog.VIRTUAL_CLOCK, len(factors), 117.0 not in factors, len(set(factors)),
                max(factors), result["splits"][0], os.path.exists(os.path.join(folder, DECLARATION_FILE)),
                os.path.basename(folder))
    return sorted((os.path.dirname(path) for path in glob.glob(os.path.join(results, "*", RESULTS_FILE))), key=order)


def find_cell(result, split, profile, link):
    return next(c for c in result["cells"] if (c["split"], c["profile"], c["link"]) == (split, profile, link))


def links_recorded(result):
    return sorted({text for cell in result["cells"] for n in cell["schemes"].values() for text in n["links"]})


def format_report(result):
    lines = [f"# Which scheme for which cluster: {result['network']} on {result['dataset']}", "",
             f"{result['repeats']} repeat(s) (seeds from {result['seed']}), {result['max_time']:g} s per run, "
             f"time to test accuracy {result['target']:g} (mean ± stddev over the repeats that reached it). "
             "Links: loopback, or every link shaped so that one transfer of the model over a worker's link lasts "
             "R steps of the fastest worker. Efficiency: samples/s over the concurrent standalone limit. A cell names "
             f"a winner where its lead over every other scheme holds by "
             f"{result.get('test_name', significance.TIME_TEST_NAME)} on the repeats' times; otherwise "
             "\"tie\" lists the schemes it does not lead beyond the spread. Fast step: the fast devices' median "
             "forward and backward pass in the run, and its ratio to the --comm-ratio probe's alone.", ""]
    for split in result["splits"]:
        lines += [f"## {SPLIT_NAMES[split]} data", "", f"Winner by time to {result['target']:g}:", "",
                  winner_table(result, split), "", detail_table(result, split), ""]
    for target in targets_of(result)[1:]:
        higher = at_target(result, target)
        for split in result["splits"]:
            lines += [f"## Time to {target:g}, {SPLIT_NAMES[split]} data", "", f"Winner by time to {target:g}:", "",
                      winner_table(higher, split), "", target_table(higher, split), ""]
    lines += ["Links as the runs recorded them:", ""] + [f"- {text}" for text in links_recorded(result)]
    return "\n".join(lines) + "\n"


def write(result, out_dir):
    """regimes.json and regimes.md; returns the table's text and the paths (the heatmaps:
    analysis/regime_figures.py)."""
    text = format_report(result)
    paths = [os.path.join(out_dir, RESULTS_FILE), os.path.join(out_dir, TABLE_FILE)]
    write_json(paths[0], result, indent=1)
    write_text(paths[1], text)
    return text, paths
