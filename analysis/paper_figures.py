"""Figures 3-5 of the ESync paper from repeated runs (the grid of analysis/paper.py):

- figure3_accuracy: test accuracy against time, i.i.d. and non-i.i.d. side by side; each mode's mean over the
  repeats with the band between its lowest and highest repeat, the standalone baseline dotted;
- figure4_throughput_traffic: samples/s and traffic per mode, i.i.d. and non-i.i.d. (hatched), mean with the
  repeats' stddev as error bars;
- figure5_compute_ratio: each device's computing-time ratio per mode (i.i.d.), devices ordered and labelled by
  their speed (the emulated slowdown, and the samples/s each trained in ESync).
"""
import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from analysis import figures, metrics, paper  # noqa: E402
from training import modes, runlog  # noqa: E402

GRID_POINTS = 200
DPI = figures.DPI


def colour(row):
    """A mode's colour in the catalog; an ESync variant's a spare one of its own."""
    return figures.colour_for(row, algorithm=row)


def step_values(points, grid):
    """The last accuracy reached at each time of the grid (NaN before the first point)."""
    times = np.array([p[1] for p in points])
    accuracies = np.array([p[2] for p in points])
    index = np.searchsorted(times, grid, side="right") - 1
    return np.where(index >= 0, accuracies[np.maximum(index, 0)], np.nan)


def repeat_curves(runs, grid):
    rows = [step_values(metrics.curve_points(run), grid) for run in runs if metrics.curve_points(run)]
    return np.array(rows) if rows else None


def draw_accuracy_panel(ax, runs_by_mode, split, target, grid, names):
    baseline = modes.STANDALONE
    for mode, runs in runs_by_mode.items():
        curves = repeat_curves(runs, grid)
        if curves is None:
            continue
        seen = ~np.all(np.isnan(curves), axis=0)
        mean = np.full(grid.shape, np.nan)
        mean[seen] = np.nanmean(curves[:, seen], axis=0)
        style = ":" if mode == baseline else "-"
        label = f"{names[mode]} (sequential SGD)" if mode == baseline else names[mode]
        ax.plot(grid, mean, style, color=colour(mode), label=label, linewidth=1.6)
        if len(curves) > 1:
            low = np.where(seen, np.nanmin(np.where(np.isnan(curves), np.inf, curves), axis=0), np.nan)
            high = np.where(seen, np.nanmax(np.where(np.isnan(curves), -np.inf, curves), axis=0), np.nan)
            ax.fill_between(grid, low, high, color=colour(mode), alpha=0.15, linewidth=0)
    ax.axhline(target, color="gray", linestyle="--", linewidth=0.8)
    ax.set_title(f"{paper.SPLIT_NAMES[split]} data")
    ax.set_xlabel(figures.time_axis([run for runs in runs_by_mode.values() for run in runs], "s"))
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")


def draw_figure3(grid_runs, network, target, names):
    longest = max((run["elapsed_time"] for split in grid_runs.values() for runs in split.values() for run in runs),
                  default=1.0)
    grid = np.linspace(0.0, longest, GRID_POINTS)
    splits = list(grid_runs)
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 4.8), dpi=DPI, sharey=True, squeeze=False)
    for ax, split in zip(axes[0], splits):
        draw_accuracy_panel(ax, grid_runs[split], split, target, grid, names)
    repeats = len(next(iter(grid_runs[splits[0]].values())))
    fig.suptitle(f"{network}: test accuracy vs. time (mean of {repeats} repeats, band: lowest to highest)")
    return fig


def draw_bar_panel(ax, report, key, ylabel, cluster_modes):
    splits = report["splits"]
    width = 0.76 / len(splits)
    for index, split in enumerate(splits):
        offset = (index - (len(splits) - 1) / 2) * width
        stats = [report["cells"][split][mode][key] for mode in cluster_modes]
        means = [s["mean"] or 0.0 for s in stats]
        errors = [s["std"] or 0.0 for s in stats]
        ax.bar(np.arange(len(cluster_modes)) + offset, means, width=width, yerr=errors, capsize=3,
               color=[colour(m) for m in cluster_modes], edgecolor="black", linewidth=0.5,
               hatch=figures.NON_IID_HATCH if split == "niid" else None,
               label=f"{paper.SPLIT_NAMES[split]} data")
    ax.set_xticks(range(len(cluster_modes)), [report["names"][m] for m in cluster_modes])
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def draw_figure4(report, cluster_modes):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), dpi=DPI)
    draw_bar_panel(axes[0], report, "samples_per_s", "samples / second", cluster_modes)
    axes[0].set_title("throughput")
    draw_bar_panel(axes[1], report, "traffic_mb_per_s", "sent + received through the workers' links (MB / s)",
                   cluster_modes)
    axes[1].set_title("traffic")
    fig.suptitle(f"{report['network']}: throughput and traffic (mean ± stddev of {len(report['repeats'])} repeats)")
    return fig


def ordered_devices(run):
    """The run's devices, slowest last: [(slowdown, device summary)]; the order is the same in every repeat."""
    devices = [(stats.get("slowdown") or 1.0, node, runlog.without_index(device), stats.get("index") or 0, stats)
               for node, device, stats in metrics.iter_devices(run["devices"])]
    return [(d[0], d[2], d[4]) for d in sorted(devices, key=lambda d: d[:4])]


def device_labels(runs_by_mode):
    """A label per device position: its device, its emulated slowdown and its samples/s in ESync's runs."""
    runs = runs_by_mode.get(modes.ESYNC) or next(iter(runs_by_mode.values()))
    per_run = [ordered_devices(run) for run in runs]
    labels = []
    for position, (slowdown, device, _) in enumerate(per_run[0]):
        speeds = [devices[position][2].get("throughput") for devices in per_run if position < len(devices)]
        speed = np.mean([s for s in speeds if s is not None]) if any(s is not None for s in speeds) else None
        label = f"{position + 1}: {device}" + figures.slowdown_note(slowdown, separator="\n")  # its own line
        labels.append(label + ("" if speed is None else f"\n{speed:.0f} samples/s"))
    return labels


def draw_figure5(grid_runs, network, cluster_modes, names):
    split = next(iter(grid_runs))  # the first split's runs: i.i.d. unless only non-i.i.d. data ran
    runs_by_mode = {mode: grid_runs[split][mode] for mode in cluster_modes}
    labels = device_labels(runs_by_mode)
    width = 0.8 / len(cluster_modes)
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(labels)), 5), dpi=DPI)
    for index, mode in enumerate(cluster_modes):
        ratios = np.array([[stats.get("compute_ratio") or 0.0 for _, _, stats in ordered_devices(run)]
                           for run in runs_by_mode[mode]])
        positions = np.arange(ratios.shape[1]) + (index - (len(cluster_modes) - 1) / 2) * width
        ax.bar(positions, ratios.mean(axis=0), width=width, yerr=ratios.std(axis=0) if len(ratios) > 1 else None,
               capsize=2, color=colour(mode), edgecolor="black", linewidth=0.5, label=names[mode])
    ax.set_xticks(range(len(labels)), labels, fontsize="small")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("1 - aggregation time / total time")
    ax.set_title(f"{network}: computing-time ratio per device ({paper.SPLIT_NAMES[split]} data, mean over the "
                 "repeats)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


CAPTION_CHARACTERS_PER_INCH = 13  # of a caption line in small type: the links of runs taken in several sittings
# make long captions


def caption_links(fig, links):
    """The links the runs had, below the title, in lines that fit the figure."""
    if links:
        title = fig.get_suptitle()
        width = int(fig.get_figwidth() * CAPTION_CHARACTERS_PER_INCH)
        caption = textwrap.fill(f"links: {'; '.join(links)}", width)
        fig.suptitle((title + "\n" if title else "") + caption, fontsize="small")


def draw_all(report, grid_runs, cluster_modes, out_dir):
    """Figures 3, 4 and 5 as PNG under out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    drawn = {
        "figure3_accuracy": draw_figure3(grid_runs, report["network"], report["target"], report["names"]),
        "figure4_throughput_traffic": draw_figure4(report, cluster_modes),
        "figure5_compute_ratio": draw_figure5(grid_runs, report["network"], cluster_modes, report["names"]),
    }
    paths = []
    for stem, fig in drawn.items():
        caption_links(fig, report.get("links"))
        paths.extend(figures.save_figure(fig, out_dir, stem, pdf=False))
    return paths
