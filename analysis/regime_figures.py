"""The heatmaps of the regime map (analysis/regime_map.py): one per split and target, schemes x cells, coloured by
each scheme's time relative to the cell's leader."""
import math
import os
import textwrap

from analysis import regime_map, significance
from analysis import scheme_names


def heatmap_text(cell, scheme):
    """A heatmap entry: 'best' or 'tie' with the time where the scheme leads, its relative time, or why it has none
    (with its final accuracy); 'tie' marks every scheme the leader does not lead beyond the spread."""
    numbers = cell["schemes"][scheme]
    tie = "tie " if cell["winner"] is None and scheme in cell["tied"] else ""
    if scheme == cell["leader"]:
        return f"{'best' if cell['winner'] else 'tie'}\n{numbers['time_to_target']['mean']:.1f} s"
    if numbers["relative_time"] is not None:
        return f"{tie}×{numbers['relative_time']:.1f}"
    final = numbers["final_accuracy"]["mean"]
    return tie + regime_map.outcome(numbers).split(" (")[0] + (f"\n{final:.2f}" if final is not None else "")


def draw(result, out_dir):
    """One heatmap per split and target: schemes x cells, coloured by time relative to the cell's leader; returns
    the paths (regimes-<split>.png for the map's target, regimes-<split>-<target>.png for a higher one)."""
    paths = draw_at(result, out_dir, "")
    for target in regime_map.targets_of(result)[1:]:
        paths += draw_at(regime_map.at_target(result, target), out_dir, f"-{target:g}")
    return paths


def draw_at(result, out_dir, suffix):
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
            cell = regime_map.find_cell(result, split, profile, link)
            for i, scheme in enumerate(schemes):
                relative = cell["schemes"][scheme]["relative_time"]
                if relative is not None:
                    values[i, j] = math.log2(relative)
                texts[i][j] = heatmap_text(cell, scheme)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(columns) + 3), 0.45 * len(schemes) + 2.2), dpi=120)
        cmap = matplotlib.colormaps["RdYlGn_r"].copy()
        cmap.set_bad("lightgrey")
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=3, aspect="auto")
        for i in range(len(schemes)):
            for j in range(len(columns)):
                ax.text(j, i, texts[i][j], ha="center", va="center", fontsize=6.5,
                        fontweight="bold" if texts[i][j].startswith(("best", "tie")) else "normal")
        names = [f"{regime_map.compact(profile)}\n{regime_map.describe_link(link)}" for profile, link in columns]
        ax.set_xticks(range(len(columns)), names, fontsize=7)
        ax.set_yticks(range(len(schemes)), [scheme_names.display(s) for s in schemes], fontsize=8)
        bar = fig.colorbar(image, ax=ax, ticks=[0, 1, 2, 3])
        bar.ax.set_yticklabels(["×1", "×2", "×4", "≥×8"])
        bar.set_label("time to the target / the leader's")
        legend = ("(best: its lead holds by " + significance.TIME_TEST_NAME + "; tie: the schemes it does not lead "
                  "beyond the spread; grey: never reached, failed or not run)")
        ax.set_title(f"{result['network']}, {regime_map.SPLIT_NAMES[split]} data: time to {result['target']:g} "
                     "relative to each cell's leader\n" + textwrap.fill(legend, int(11 * fig.get_figwidth())),
                     fontsize=9)
        fig.tight_layout()
        path = os.path.join(out_dir, f"regimes-{split}{suffix}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


ANSWER_STYLES = {"yes": ("tab:green", "the cluster pays"), "no": ("tab:red", "one device is sooner"),
                 "cannot be told": ("grey", "cannot be told")}
BOUND_MARKERS = {"lower": ">", "upper": "<", "both": "x", None: "o"}  # x: a miss on both sides, no bound either way


def draw_answers(points, path, shared=""):
    """One row per (label, answer, one_device_over_best) of `points`, top to bottom: one fast device's median time over
    the best cluster scheme's with its interval, on a log scale, coloured by the answer; `>` and `<` mark a bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    shown = [(label, answer, found) for label, answer, found in points if found]
    fig, ax = plt.subplots(figsize=(9, 0.2 * len(shown) + 1.5), dpi=120)
    for y, (label, answer, found) in enumerate(reversed(shown)):
        colour = ANSWER_STYLES.get(answer, ANSWER_STYLES["cannot be told"])[0]
        if found["low"] is not None and found["high"] is not None:  # open where too few pairs differ: no line
            ax.plot([found["low"], found["high"]], [y, y], color=colour, linewidth=1.5)
        ax.plot(found["ratio"], y, BOUND_MARKERS.get(found.get("bound")), color=colour, markersize=5)
    ax.axvline(1, color="black", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(shown)), [label for label, _, _ in reversed(shown)], fontsize=6.5)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.grid(axis="x", which="both", linewidth=0.3)
    ax.set_xlabel("one fast device's mean capped time / the best cluster scheme's, paired by seed\n(95 % interval, "
                  "the paired test's, none where too few pairs differ to bound it;\n> and <: a bound; x: misses on "
                  "both sides)", fontsize=8)
    ax.set_title(f"Does the cluster pay?{f' {shared}' if shared else ''}", fontsize=9)
    handles = [Line2D([], [], color=colour, marker="o", label=name) for colour, name in ANSWER_STYLES.values()]
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
