"""After the modes: each mode's summary JSON, the figures of the experiment's modes, and the table; what ran where
(experiment.json) beside them."""
import os
import shlex
import sys
import time

from analysis import summary
from analysis.tables import format_cell, text_table
from launcher.supervision import INTERRUPTS
from training.faults.failures import EXIT_FAILURE
from training.files import read_json, write_json

EXPERIMENT_FILE = "experiment.json"


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
    runs = summaries(network_dir, folders)
    INTERRUPTS.check()
    drawn = draw(runs, experiment.network, network_dir) if experiment.figures else []
    command = shlex.join(["python", "launch.py", *experiment.command]) if experiment.command else None
    write_json(os.path.join(network_dir, EXPERIMENT_FILE), {
        "command": command, "machine": machine(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
        "folders": folders, "target": target,
        "links": experiment.describe_links(), "devices": experiment.cluster.devices_described}, indent=1)
    print()
    print(format_table(runs, target))
    print("summaries: " + ", ".join(summary.summary_path(network_dir, run["mode"]) for run in runs))
    print(f"links: {experiment.describe_links()}")
    print(f"devices: {experiment.cluster.devices_described}")
    if drawn:
        print("figures:\n" + "\n".join(f"  {path}" for path in drawn), flush=True)
    return 0


def summaries(network_dir, folders):
    """The summaries of the mode folders that have one, in the tables' order of modes."""
    return sorted(filter(None, (summary.load_summary(network_dir, f) for f in folders)), key=summary.run_order)


def draw(runs, network, network_dir):
    from analysis import figures  # matplotlib: only when drawing

    return figures.draw_all(runs, network, os.path.join(network_dir, "figures"), figures.parse_args(["-n", network]))


def format_table(runs, target):
    headers = ["mode", "samples/s", f"time to {target:g} (s)", "final accuracy", "traffic (MB/s)"]
    columns = [("cluster_throughput", ".1f"), ("time_to_accuracy", ".1f"), ("final_accuracy", ".4f"),
               ("traffic_mb_per_s", ".2f")]
    return text_table(headers, [[run["mode"]] + [format_cell(run.get(key), spec) for key, spec in columns]
                                for run in runs])


def machine():
    """The processor's model name as Linux gives it, or what the platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform
        return platform.processor() or platform.machine()


def demo_block(folder):
    """`launch.py docs`' `demo` kind: the table an experiment printed, from the summaries and experiment.json
    committed in `folder` (a copy of its network's log folder), under the machine that printed it."""
    ran = read_json(os.path.join(folder, EXPERIMENT_FILE))
    runs = summaries(folder, ran["folders"])
    table = "\n".join("    " + line for line in format_table(runs, ran["target"]).splitlines())
    return f"{ran['machine']}, {ran['cores']} cores, {ran['date']}:\n\n{table}\n"
