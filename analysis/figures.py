"""Draw the comparison figures of every algorithm run on one network, and print the numbers behind them.

    python drawer.py -b logs -n lenet
    python drawer.py -b logs -n resnet18-v1 --pdf --smooth 5 --every 2 --standalone-accuracy 0.93

Reads the summary JSON of each mode folder under <base>/<network>/ (summarizing the logs first where the JSON
is missing) and writes accuracy_vs_time, accuracy_vs_time_non_iid, throughput, traffic and compute_ratio
images into <base>/<network>/figures unless -o says otherwise. Runs with an evaluator process's log add its
curve (dashed) to the accuracy figures and an accuracy_vs_step figure (test accuracy against global steps done).
"""
import argparse
import logging
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from analysis import metrics, tables  # noqa: E402
from analysis import summary as runs_summary  # noqa: E402
from analysis.cli import logs_parser, positive_int, run_command  # noqa: E402
from training import modes, runlog  # noqa: E402
from training.runlog import is_number  # noqa: E402

log = logging.getLogger("drawer")

SPARE_COLOURS = ["black", "darkgoldenrod", "navy"]  # for runs of a mode the catalog no longer holds
NON_IID_HATCH = "//"
FIGURE_SIZE = (8, 5)
DPI = 120


class DrawError(Exception):
    """Nothing can be drawn: the folder is wrong or holds no runs."""


# ----------------------------------------------------------------------------------------------
# Runs and their labels


def catalog_entry(mode):
    """The mode in the catalog (training/modes.py) of a mode folder ('esync', 'sync-niid', ...), or None for a mode
    it no longer holds."""
    return modes.MODES.get(runs_summary.split_mode(mode)[0])


def colour_for(mode, algorithm=""):
    """The colour of a mode folder's mode ('esync', 'sync-niid', ...) in the catalog, in every figure; for a mode the
    catalog no longer holds, a spare one picked by the run's algorithm name."""
    entry = catalog_entry(mode)
    if entry:
        return entry.colour
    return SPARE_COLOURS[sum(map(ord, algorithm)) % len(SPARE_COLOURS)]


def slowdown_note(slowdown, separator=" "):
    """'(4× slower)' after `separator`, to follow the name of a device whose log records an emulated slowdown above
    1; '' for any other device."""
    return f"{separator}({slowdown:g}× slower)" if is_number(slowdown) and slowdown > 1 else ""


def standalone_mode():
    """The mode that trains without a cluster: the baseline line of the accuracy figures."""
    return modes.MODES[modes.STANDALONE]


def curve_label(run):
    """The algorithm, the Byzantine workers it trained with, if any, how many workers' logs a partial summary holds,
    and how often the launcher started the job again (--max-restarts)."""
    label = run["algorithm"]
    if run.get("attacked"):
        label += f" ({run.get('byzantine_workers', '?')} Byzantine)"
    partial = run.get("partial")
    if partial:
        label += f" (partial: {partial['workers']} of {partial['of']} workers)"
    restarts = len(run.get("restarts") or ())
    if restarts:
        label += f" ({restarts} restart{'s' if restarts > 1 else ''})"
    return label


def run_label(run):
    return f"{curve_label(run)} (non-IID)" if run.get("non_iid") else curve_label(run)


def is_standalone(run):
    return catalog_entry(run["mode"]) is standalone_mode()


def obtain_summary(network_dir, mode, target, num_params, refresh):
    """The mode's summary JSON, produced from its logs when missing (or when refresh is asked)."""
    existing = None if refresh else runs_summary.load_summary(network_dir, mode)
    if existing is not None:
        return existing
    if not runlog.has_rounds(os.path.join(network_dir, mode)):
        return None
    log.info("summarizing %s from its iteration logs", mode)
    summary = runs_summary.summarize_mode(network_dir, mode, target, num_params)
    runs_summary.write_summary(summary, network_dir, mode)
    return summary


def load_runs(network_dir, target, num_params=None, refresh=False):
    """Every summarized run under network_dir, in a fixed algorithm order (i.i.d. first)."""
    if not os.path.isdir(network_dir):
        raise DrawError(f"no such log folder: {network_dir}")
    runs = []
    for mode in runs_summary.mode_folders(network_dir):
        try:
            summary = obtain_summary(network_dir, mode, target, num_params, refresh)
        except runs_summary.SummaryError as error:
            log.warning("skipping %s: %s", mode, error)
            continue
        if summary is not None:
            runs.append(summary)
    if not runs:
        raise DrawError(f"no summaries or iteration logs under {network_dir}")
    return sorted(runs, key=runs_summary.run_order)


# ----------------------------------------------------------------------------------------------
# Curve shaping


def moving_average(values, window):
    """Trailing mean over up to `window` values; keeps the length, so the curve starts where the data does."""
    averaged, running = [], 0.0
    for i, value in enumerate(values):
        running += value
        if i >= window:
            running -= values[i - window]
        averaged.append(running / min(i + 1, window))
    return averaged


def every_kth(values, k):
    """Every k-th value, always keeping the last one so the curve ends where the data does."""
    if k <= 1 or not values:
        return list(values)
    kept = list(values[::k])
    if (len(values) - 1) % k:
        kept.append(values[-1])
    return kept


def accuracy_curve(run, smooth=1, every=1, evaluator=False):
    """(minutes, accuracies) of the run's evaluating device, or of its evaluator process."""
    points = metrics.evaluator_points(run) if evaluator else metrics.accuracy_points(run)
    minutes = [p[1] / 60.0 for p in points]
    accuracies = moving_average([p[2] for p in points], smooth)
    return every_kth(minutes, every), every_kth(accuracies, every)


def step_curve(run, smooth=1, every=1, evaluator=False):
    """(global steps done, accuracies); a worker's iteration N ends after N + 1 global steps."""
    if evaluator:
        points = [(p[0], p[2]) for p in metrics.evaluator_points(run)]
    else:
        points = [(p[0] + 1, p[2]) for p in metrics.accuracy_points(run)]
    accuracies = moving_average([p[1] for p in points], smooth)
    return every_kth([p[0] for p in points], every), every_kth(accuracies, every)


def headline_points(run):
    """The accuracy points the table reports (metrics.curve_points)."""
    return metrics.curve_points(run)


def standalone_accuracy(runs, override=None):
    if override is not None:
        return override
    standalone = [r["best_accuracy"] for r in runs if is_standalone(r) and r.get("best_accuracy") is not None]
    return max(standalone) if standalone else None


# ----------------------------------------------------------------------------------------------
# Figures


def new_axes(title, xlabel, ylabel):
    fig, ax = plt.subplots(figsize=FIGURE_SIZE, dpi=DPI)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def plot_curves(ax, run, curve, smooth, every, label):
    """The run's curve: its evaluator's alone where it has no inline one (solid), else the inline one (solid) and
    the evaluator's (dashed); dash-dotted and crosses for a run with Byzantine workers."""
    both = bool(metrics.accuracy_points(run)) and bool(metrics.evaluator_points(run))
    for evaluator, style, suffix in ((False, "-", ""), (True, "--" if both else "-", " (evaluator)" if both else "")):
        xs, accuracies = curve(run, smooth, every, evaluator)
        if xs:
            if run.get("attacked"):
                style = "-." if not evaluator else ":"
            marker = ("x" if run.get("attacked") else ".") if len(xs) < 50 else None
            ax.plot(xs, accuracies, style, marker=marker,
                    color=colour_for(run["mode"], run["algorithm"]), label=label + suffix)


def time_axis(runs, unit):
    """The label of a time axis: virtual seconds where the runs ran on a virtual clock, else the wall clock's."""
    virtual = any((run.get("clock") or {}).get("kind") == runlog.VIRTUAL_CLOCK for run in runs)
    return f"{'virtual' if virtual else 'wall-clock'} time ({unit})"


def draw_accuracy(runs, network, non_iid, standalone, smooth=1, every=1):
    """Accuracy against wall-clock time for the distributed runs of one data split, or None if none evaluated."""
    curves = [r for r in runs if bool(r.get("non_iid")) == non_iid and not is_standalone(r)
              and (metrics.accuracy_points(r) or metrics.evaluator_points(r))]
    if not curves:
        return None
    split = "non-i.i.d." if non_iid else "i.i.d."
    fig, ax = new_axes(f"{network}: test accuracy vs. time ({split} data)", time_axis(curves, "minutes"),
                       "test accuracy")
    for run in curves:
        plot_curves(ax, run, accuracy_curve, smooth, every, curve_label(run))
    if standalone is not None:
        baseline = standalone_mode()
        ax.axhline(standalone, linestyle=":", color=baseline.colour, label=f"{baseline.display} ({standalone:.3f})")
    ax.legend(loc="best")
    return fig


def draw_accuracy_vs_step(runs, network, smooth=1, every=1):
    """Accuracy against global steps for the runs an evaluator process followed, or None without one."""
    curves = [r for r in runs if metrics.evaluator_points(r)]
    if not curves:
        return None
    fig, ax = new_axes(f"{network}: test accuracy vs. global steps", "global steps", "test accuracy")
    for run in curves:
        plot_curves(ax, run, step_curve, smooth, every, run_label(run))
    ax.legend(loc="best")
    return fig


def bar_style(run):
    colour = colour_for(run["mode"], run["algorithm"])
    return {"color": colour, "hatch": NON_IID_HATCH if run.get("non_iid") else None, "edgecolor": "black",
            "linewidth": 0.5}


def draw_bars(runs, values, title, ylabel, value_format, missing_note=None):
    """One bar per run; runs without a value get an 'n/a' label instead of a bar."""
    fig, ax = new_axes(title, "algorithm", ylabel)
    positions = range(len(runs))
    for position, run, value in zip(positions, runs, values):
        bars = ax.bar(position, value or 0.0, width=0.6, **bar_style(run))
        ax.bar_label(bars, labels=["n/a" if value is None else value_format.format(value)], padding=2)
    ax.set_xticks(list(positions), [run_label(r) for r in runs], rotation=20 if len(runs) > 4 else 0)
    ax.set_xlim(-0.75, len(runs) - 0.25)
    highest = max((v for v in values if v is not None), default=0.0)
    ax.set_ylim(0, highest * 1.15 if highest > 0 else 1.0)
    if missing_note and None in values:
        fig.text(0.01, 0.01, f"n/a: {missing_note}", fontsize="small", color="dimgray")
    return fig


def draw_throughput(runs, network):
    return draw_bars(runs, [r.get("cluster_throughput") for r in runs],
                     f"{network}: data throughput", "samples / second", "{:.0f}")


def draw_traffic(runs, network):
    return draw_bars(runs, [r.get("traffic_mb_per_s") for r in runs],
                     f"{network}: traffic through the workers' links", "sent + received (MB / second)", "{:.2f}",
                     missing_note="model size unknown (no meta.json; summarize with --num-params)")


def device_labels(run):
    """{label: compute_ratio} per device: node/folder, which names the device by its position in the job (the same
    in every mode of an experiment), a slow device's label saying how much slower it is."""
    return {f"{node}/{device}" + slowdown_note(stats.get("slowdown")): stats.get("compute_ratio")
            for node, device, stats in metrics.iter_devices(run["devices"])}


def draw_compute_ratio(runs, network):
    """Grouped bars: one group per device, one bar per run."""
    ratios = [device_labels(r) for r in runs]
    groups = sorted(set().union(*ratios))
    width = 0.8 / len(runs)
    fig, ax = new_axes(f"{network}: computing-time ratio per device", "device (node/device)",
                       "1 - aggregation time / total time")
    for index, (run, per_device) in enumerate(zip(runs, ratios)):
        offsets = [g + (index - (len(runs) - 1) / 2) * width for g in range(len(groups))]
        heights = [per_device.get(label) or 0.0 for label in groups]
        ax.bar(offsets, heights, width=width, label=run_label(run), **bar_style(run))
    crowded = len(groups) > 3
    ax.set_xticks(range(len(groups)), groups, rotation=30 if crowded else 0, ha="right" if crowded else "center")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def save_figure(fig, outdir, stem, pdf):
    fig.tight_layout()
    paths = [os.path.join(outdir, f"{stem}.png")]
    if pdf:
        paths.append(os.path.join(outdir, f"{stem}.pdf"))
    for path in paths:
        fig.savefig(path)
    plt.close(fig)
    return paths


def draw_all(runs, network, outdir, options):
    """Draw every figure the runs allow; returns the paths written."""
    standalone = standalone_accuracy(runs, options.standalone_accuracy)
    figures = {
        "accuracy_vs_time": draw_accuracy(runs, network, False, standalone, options.smooth, options.every),
        "accuracy_vs_time_non_iid": draw_accuracy(runs, network, True, standalone, options.smooth, options.every),
        "accuracy_vs_step": draw_accuracy_vs_step(runs, network, options.smooth, options.every),
        "throughput": draw_throughput(runs, network),
        "traffic": draw_traffic(runs, network),
        "compute_ratio": draw_compute_ratio(runs, network),
    }
    os.makedirs(outdir, exist_ok=True)
    written = []
    for stem, fig in figures.items():
        if fig is None:
            log.info("no accuracy points for %s; figure skipped", stem)
            continue
        written.extend(save_figure(fig, outdir, stem, options.pdf))
    return written


# ----------------------------------------------------------------------------------------------
# Table


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def table_row(run, target):
    points = headline_points(run)
    ratios = [stats.get("compute_ratio") for _, _, stats in metrics.iter_devices(run["devices"])]
    return [run_label(run), run.get("num_workers"), run.get("cluster_throughput"), run.get("applied_throughput"),
            run.get("traffic_mb_per_s"),
            run.get("num_rounds"), metrics.time_to_reach(points, target),
            points[-1][2] if points else None, mean(ratios)]


def format_table(runs, target):
    headers = ["algorithm", "workers", "samples/s", "applied samples/s", "MB/s", "rounds", f"time to {target:g} (s)",
               "final acc", "compute ratio"]
    specs = ["", "d", ".1f", ".1f", ".2f", "d", ".1f", ".4f", ".3f"]
    return tables.text_table(headers, [[tables.format_cell(v, spec) for v, spec in zip(table_row(r, target), specs)]
                                       for r in runs])


# ----------------------------------------------------------------------------------------------
# Command line


def non_negative_fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text}")
    return value


def parse_args(argv):
    parser = logs_parser("Draw accuracy, throughput, traffic and computing-ratio figures for every run of a network.")
    parser.add_argument("-o", "--outdir", help="folder for the images (default: <base>/<network>/figures)")
    parser.add_argument("--pdf", action="store_true", help="write a PDF beside every PNG")
    parser.add_argument("--smooth", type=positive_int, default=1, metavar="W",
                        help="moving-average window for accuracy curves (default: 1, raw)")
    parser.add_argument("--every", type=positive_int, default=1, metavar="K",
                        help="plot every K-th accuracy point (default: 1, all)")
    parser.add_argument("--standalone-accuracy", type=non_negative_fraction, metavar="A",
                        help="standalone accuracy line (default: best accuracy of the 'local' run, if any)")
    parser.add_argument("--target", type=float, default=runs_summary.DEFAULT_TARGET,
                        help=f"accuracy for the time-to-target column (default: {runs_summary.DEFAULT_TARGET})")
    parser.add_argument("--num-params", type=positive_int,
                        help="parameter count, used when summarizing logs without meta.json")
    parser.add_argument("--refresh", action="store_true", help="re-summarize runs even when a summary JSON exists")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress as well as problems")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    network_dir = os.path.join(args.base_dir, args.network)
    outdir = args.outdir or os.path.join(network_dir, "figures")

    def draw():
        runs = load_runs(network_dir, args.target, args.num_params, args.refresh)
        written = draw_all(runs, args.network, outdir, args)
        print(format_table(runs, args.target))
        print()
        for path in written:
            print(path)
        return 0

    return run_command("drawer.py", args.verbose, draw, DrawError)
