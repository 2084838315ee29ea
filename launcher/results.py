"""After the modes: each mode's summary JSON, the figures of the experiment's modes, and the table."""
import os
import sys

from analysis import summary
from analysis.tables import format_cell, text_table
from launcher.supervision import INTERRUPTS
from training.faults.failures import EXIT_FAILURE


def summarize_and_draw(experiment):
    """Summary JSON per mode, figures of this experiment's modes (unless --no-figures), and a table; 0 or
    EXIT_FAILURE."""
    network_dir = os.path.join(experiment.log_dir, experiment.network)
    folders = [os.path.basename(experiment.mode_folder(mode)) for mode in experiment.modes]
    target = experiment.target_accuracy or summary.DEFAULT_TARGET
    try:
        summary.summarize_modes(network_dir, folders, target, None)
    except summary.SummaryError as error:
        remote = experiment.tracker not in (None, "local")
        elsewhere = " (with a remote --tracker the logs stay on the hosts)" if remote else ""
        print(f"launch.py: no summary: {error}{elsewhere}", file=sys.stderr)
        return 0 if remote else EXIT_FAILURE
    runs = sorted(filter(None, (summary.load_summary(network_dir, f) for f in folders)), key=summary.run_order)
    INTERRUPTS.check()
    drawn = draw(runs, experiment.network, network_dir) if experiment.figures else []
    print()
    print(format_table(runs, target))
    print("summaries: " + ", ".join(summary.summary_path(network_dir, run["mode"]) for run in runs))
    print(f"links: {experiment.describe_links()}")
    print(f"devices: {experiment.cluster.devices_described}")
    if drawn:
        print("figures:\n" + "\n".join(f"  {path}" for path in drawn), flush=True)
    return 0


def draw(runs, network, network_dir):
    from analysis import figures  # matplotlib: only when drawing

    return figures.draw_all(runs, network, os.path.join(network_dir, "figures"), figures.parse_args(["-n", network]))


def format_table(runs, target):
    headers = ["mode", "samples/s", f"time to {target:g} (s)", "final accuracy", "traffic (MB/s)"]
    columns = [("cluster_throughput", ".1f"), ("time_to_accuracy", ".1f"), ("final_accuracy", ".4f"),
               ("traffic_mb_per_s", ".2f")]
    return text_table(headers, [[run["mode"]] + [format_cell(run.get(key), spec) for key, spec in columns]
                                for run in runs])
