"""Which scheme wins where: the runs of `launch.py regimes` read back into one map.

The grid is links (loopback, or links shaped to a communication ratio R) x heterogeneity profiles x data splits,
with repeats; each scheme runs once per cell and repeat, one launcher run each, logging under

    <log-dir>/<link>/<profile>/<split>/repeat-<r>/<scheme>/<network>/<mode>[-niid]/

beside a STATUS_FILE with the launcher's exit code. Per cell and scheme: the time to the target accuracy (mean ±
stddev over the repeats that reached it, and how many did), samples/s, efficiency against the concurrent
standalone limit of the profile, bytes through the workers' links per trained sample, final accuracy. A cell's
winner is the scheme that reached the target in the most repeats, the soonest on average among those; every
other scheme's time is given relative to the winner's. A run that failed shows as failed, one that never reached
the target as never, not as zero.
"""
import math
import os

from analysis import summary as summaries
from analysis.paper import format_statistic, statistics_of, time_to_target
from analysis.tables import markdown_table
from training import esync_variants, modes, runlog
from training.files import write_json, write_text

PLAN_FILE = "regimes-plan.json"     # the grid, written before the first run: --report-only reads it
LIMITS_FILE = "limits.json"         # {profile: [each worker's concurrent standalone samples/s]}
STATUS_FILE = "status.json"         # in each run's folder: {"exit_code": the launcher's}
RESULTS_FILE = "regimes.json"
TABLE_FILE = "regimes.md"
LOOPBACK = "loopback"
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
    return profile.replace(",", "-")


def run_dir(log_dir, link, profile, split, repeat, scheme):
    return os.path.join(log_dir, link_folder(link), profile_folder(profile), split, f"repeat-{repeat}", scheme)


def mode_of(scheme):
    """(mode, ESync variant or None) of a scheme: a mode of the catalog, or esync-<variant>
    (training/esync_variants.py)."""
    if scheme.startswith(esync_variants.PREFIX) and scheme not in modes.MODES:
        return "esync", scheme[len(esync_variants.PREFIX):]
    return scheme, None


def display(scheme):
    mode, variant = mode_of(scheme)
    name = modes.MODES[mode].display
    return f"{name} ({esync_variants.describe(variant)})" if variant else name


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


def cell_of_scheme(runs, limit, target):
    """The numbers of one scheme in one cell from its repeats' runs."""
    done = [run["summary"] for run in runs if run["status"] == "ok"]
    times = [time_to_target(s, target) for s in done]
    speeds = [s.get("cluster_throughput") for s in done]
    return {
        "repeats": len(runs),
        "failed": sum(run["status"] == "failed" for run in runs),
        "not_run": sum(run["status"] == "not run" for run in runs),
        "reached": sum(t is not None for t in times),
        "time_to_target": statistics_of(times),
        "samples_per_s": statistics_of(speeds),
        "efficiency": statistics_of([v / limit if v is not None and limit else None for v in speeds]),
        "bytes_per_sample": statistics_of([bytes_per_sample(s) for s in done]),
        "final_accuracy": statistics_of([s.get("final_accuracy") for s in done]),
        "links": sorted({s["links"] for s in done if s.get("links")}),
    }


def bytes_per_sample(run):
    traffic, speed = run.get("traffic_mb_per_s"), run.get("cluster_throughput")
    return traffic * 1e6 / speed if traffic is not None and speed else None


def rank(cell):
    """{scheme: relative time} and the winner of one cell: the most repeats at the target, then the soonest mean;
    a scheme that never reached it has no relative time."""
    reaching = {scheme: c for scheme, c in cell.items() if c["reached"]}
    if not reaching:
        return None, {}
    most = max(c["reached"] for c in reaching.values())
    winner = min((s for s, c in reaching.items() if c["reached"] == most),
                 key=lambda s: reaching[s]["time_to_target"]["mean"])
    best = reaching[winner]["time_to_target"]["mean"]
    return winner, {scheme: c["time_to_target"]["mean"] / best for scheme, c in reaching.items()}


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
                cell = {scheme: cell_of_scheme([read_run(log_dir, plan, link, profile, split, r, scheme)
                                                for r in range(1, plan["repeats"] + 1)], limit, plan["target"])
                        for scheme in plan["schemes"]}
                winner, relative = rank(cell)
                for scheme, numbers in cell.items():
                    numbers["relative_time"] = relative.get(scheme)
                cells.append({"split": split, "profile": profile, "link": link, "limit_samples_per_s": limit,
                              "winner": winner, "schemes": cell})
    return {**plan, "cells": cells}


# ----------------------------------------------------------------------------------------------
# The tables


def outcome(numbers):
    """A scheme's time in a cell as text: 'mean ± std s', with how many repeats reached it, or why none did."""
    if numbers["reached"]:
        return format_statistic(numbers["time_to_target"], ".1f", " s")
    if numbers["failed"]:
        return f"failed ({numbers['failed']} of {numbers['repeats']})"
    return "not run" if numbers["not_run"] == numbers["repeats"] else "never"


def winner_table(result, split):
    """Rows: profiles; columns: links; each entry the winner, its time and the runner-up's relative time."""
    rows = []
    for profile in result["profiles"]:
        row = [profile]
        for link in result["links"]:
            cell = find_cell(result, split, profile, link)
            if cell["winner"] is None:
                row.append(nobody_reached(cell))
                continue
            others = sorted((n["relative_time"], s) for s, n in cell["schemes"].items()
                            if n["relative_time"] is not None and s != cell["winner"])
            entry = f"**{display(cell['winner'])}** {outcome(cell['schemes'][cell['winner']])}"
            row.append(entry + (f"; next {display(others[0][1])} ×{others[0][0]:.2f}" if others else ""))
        rows.append(row)
    return markdown_table(["workers"] + [describe_link(link) for link in result["links"]], rows)


def nobody_reached(cell):
    """A cell where no scheme reached the target: which one came closest, by its final accuracy."""
    if all(n["not_run"] == n["repeats"] for n in cell["schemes"].values()):
        return "not run"
    finals = {s: n["final_accuracy"]["mean"] for s, n in cell["schemes"].items()
              if n["final_accuracy"]["mean"] is not None}
    if not finals:
        return "none reached the target"
    closest = max(finals, key=finals.get)
    return f"none reached the target; closest {display(closest)} at {finals[closest]:.3f}"


def detail_table(result, split):
    headers = ["workers", "links", "scheme", f"time to {result['target']:g}", "× winner", "samples/s",
               "efficiency", "bytes/sample", "final accuracy"]
    rows = []
    for profile in result["profiles"]:
        for link in result["links"]:
            cell = find_cell(result, split, profile, link)
            ordered = sorted(cell["schemes"].items(), key=lambda item: (item[1]["relative_time"] is None,
                                                                          item[1]["relative_time"] or 0))
            for scheme, n in ordered:
                relative = n["relative_time"]
                rows.append([profile, describe_link(link), display(scheme), outcome(n),
                             "-" if relative is None else f"{relative:.2f}",
                             format_statistic(n["samples_per_s"], ".0f"), format_statistic(n["efficiency"], ".2f"),
                             format_statistic(n["bytes_per_sample"], ".0f"),
                             format_statistic(n["final_accuracy"], ".3f")])
    return markdown_table(headers, rows)


def find_cell(result, split, profile, link):
    return next(c for c in result["cells"] if (c["split"], c["profile"], c["link"]) == (split, profile, link))


def links_recorded(result):
    return sorted({text for cell in result["cells"] for n in cell["schemes"].values() for text in n["links"]})


def format_report(result):
    lines = [f"# Which scheme for which cluster: {result['network']} on {result['dataset']}", "",
             f"{result['repeats']} repeat(s) (seeds from {result['seed']}), {result['max_time']:g} s per run, "
             f"time to test accuracy {result['target']:g} (mean ± stddev over the repeats that reached it). "
             "Links: loopback, or every link shaped so that one transfer of the model over a worker's link lasts "
             "R steps of the fastest worker. Efficiency: samples/s over the concurrent standalone limit.", ""]
    for split in result["splits"]:
        lines += [f"## {SPLIT_NAMES[split]} data", "", "Winner by time to the target:", "",
                  winner_table(result, split), "", detail_table(result, split), ""]
    lines += ["Links as the runs recorded them:", ""] + [f"- {text}" for text in links_recorded(result)]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# The heatmaps


def draw(result, out_dir):
    """One heatmap per split: schemes x cells, coloured by time relative to the cell's winner; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths = []
    columns = [(profile, link) for profile in result["profiles"] for link in result["links"]]
    schemes = result["schemes"]
    for split in result["splits"]:
        values = np.full((len(schemes), len(columns)), np.nan)
        texts = [["" for _ in columns] for _ in schemes]
        for j, (profile, link) in enumerate(columns):
            cell = find_cell(result, split, profile, link)
            for i, scheme in enumerate(schemes):
                numbers = cell["schemes"][scheme]
                relative = numbers["relative_time"]
                if relative is not None:
                    values[i, j] = math.log2(relative)
                    best = scheme == cell["winner"]
                    texts[i][j] = f"best\n{numbers['time_to_target']['mean']:.1f} s" if best else f"×{relative:.1f}"
                else:
                    final = numbers["final_accuracy"]["mean"]
                    texts[i][j] = outcome(numbers).split(" (")[0] + (f"\n{final:.2f}" if final is not None else "")
        fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(columns) + 3), 0.45 * len(schemes) + 2.2), dpi=120)
        cmap = matplotlib.colormaps["RdYlGn_r"].copy()
        cmap.set_bad("lightgrey")
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=3, aspect="auto")
        for i in range(len(schemes)):
            for j in range(len(columns)):
                ax.text(j, i, texts[i][j], ha="center", va="center", fontsize=6.5,
                        fontweight="bold" if "best" in texts[i][j] else "normal")
        ax.set_xticks(range(len(columns)), [f"{p}\n{describe_link(link)}" for p, link in columns], fontsize=7)
        ax.set_yticks(range(len(schemes)), [display(s) for s in schemes], fontsize=8)
        bar = fig.colorbar(image, ax=ax, ticks=[0, 1, 2, 3])
        bar.ax.set_yticklabels(["×1", "×2", "×4", "≥×8"])
        bar.set_label("time to the target / the winner's")
        ax.set_title(f"{result['network']}, {SPLIT_NAMES[split]} data: time to {result['target']:g} relative to "
                     "each cell's winner\n(grey: never reached, with the final accuracy; failed or not run)",
                     fontsize=9)
        fig.tight_layout()
        path = os.path.join(out_dir, f"regimes-{split}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def write(result, out_dir, figures=True):
    """regimes.json, regimes.md and (with `figures`) the heatmaps; returns the table's text and the paths."""
    text = format_report(result)
    paths = [os.path.join(out_dir, RESULTS_FILE), os.path.join(out_dir, TABLE_FILE)]
    write_json(paths[0], result, indent=1)
    write_text(paths[1], text)
    return text, paths + (draw(result, out_dir) if figures else [])
