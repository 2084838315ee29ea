"""Summarize the per-device iteration logs of one training run into a single JSON file.

    python summary.py -b logs -n lenet -m esync
    python summary.py -b logs -n lenet --all --target 0.9
    python summary.py -b logs -n resnet18-v1 -m sync --num-params 11689512   # original logs, no meta.json

Workers log one JSON object per global iteration at
<base>/<network>/<mode>/<node>/<device>/iter-<N>.txt; the summary is written beside the node folders, named
after the mode's summary name in training/modes.py (esync -> ESync.json, sync-niid -> Sync-Non-IID.json,
zeno-async -> ZenoAsync.json, ...). An evaluator process's log beside the node folders
(<base>/<network>/<mode>/evaluator.jsonl, see training/evaluator.py) becomes the summary's "evaluator" entry: its
accuracy points [step, seconds, accuracy] and their final, best and time-to-target numbers.
"""
import argparse
import json
import logging
import os
import sys

from training import modes, runlog
from training.evaluator import EVALUATOR_LOG
from training.failures import EXIT_USAGE
from training.files import write_json
from training.runlog import is_number

log = logging.getLogger("summary")

BYTES_PER_PARAM = 4  # MXNet weights are float32
DEFAULT_TARGET = 0.85


class SummaryError(Exception):
    """A problem that makes the whole summary impossible, as opposed to one unreadable file."""


# ----------------------------------------------------------------------------------------------
# Mode folder names


def split_mode(mode):
    """'esync-niid' -> ('esync', True); 'sync' -> ('sync', False); 'zeno-attack-niid' -> ('zeno', True)."""
    base, _, non_iid = runlog.split_run_folder(mode)
    return base, non_iid


def is_attacked(mode):
    """Whether the mode folder holds a run with Byzantine workers ('<mode>-attack[-niid]')."""
    return runlog.split_run_folder(mode)[1]


def is_known_mode(mode):
    return split_mode(mode)[0] in modes.MODES


def catalog_entry(mode):
    """The mode of the catalog (training/modes.py) a mode folder holds a run of."""
    base, _ = split_mode(mode)
    if base not in modes.MODES:
        known = ", ".join(modes.names())
        raise SummaryError(f"unknown mode '{mode}' (known: {known}, each optionally with "
                           f"'{runlog.NON_IID_SUFFIX}')")
    return modes.MODES[base]


def algorithm_name(mode):
    return catalog_entry(mode).display


def run_order(run):
    """I.i.d. runs first, then the catalog's order, a clean run before its attacked twin."""
    order = modes.names()
    base = split_mode(run["mode"])[0]
    rank = order.index(base) if base in order else len(order)
    return bool(run.get("non_iid")), rank, bool(run.get("attacked")), run["algorithm"]


def summary_file_name(mode):
    attack = "-Attack" if is_attacked(mode) else ""
    non_iid = "-Non-IID" if split_mode(mode)[1] else ""
    return f"{catalog_entry(mode).summary_name}{attack}{non_iid}.json"


# ----------------------------------------------------------------------------------------------
# Per-device math


def missing_iterations(iterations):
    """Round numbers absent between round 1 and the last one logged."""
    present = set(iterations)
    return [i for i in range(1, max(iterations, default=0) + 1) if i not in present]


def time_to_reach(points, target):
    """Seconds until an accuracy point first reaches target; points are [iteration, seconds, accuracy]."""
    for _, seconds, accuracy in points:
        if accuracy >= target:
            return seconds
    return None


def ratio(numerator, denominator):
    return numerator / denominator if denominator > 0 else None


def summarize_device(records):
    """Turn {iteration: record} of one device into lists over iterations plus rates.

    Records must already be valid (runlog.DeviceLog reads only those).
    """
    iterations = sorted(records)
    ordered = [records[i] for i in iterations]
    elapsed = [float(r["total_time"]) for r in ordered]
    aggregate = [runlog.aggregation_seconds(r) for r in ordered]
    samples = [r["num_samples"] for r in ordered]
    accuracy = [r.get("accuracy") for r in ordered]
    points = [[i, t, a] for i, t, a in zip(iterations, elapsed, accuracy) if a is not None]
    last_time = max(elapsed, default=0.0)
    compute_share = ratio(sum(aggregate), last_time)
    sent, received = (logged_total(ordered, field) for field in runlog.TRAFFIC_FIELDS)
    return {
        "iterations": iterations,
        "missing_iterations": missing_iterations(iterations),
        "num_rounds": max(iterations, default=0),
        "accuracy_list": accuracy,
        "accuracy_time_list": [p[1] for p in points],
        "accuracy_points": points,
        "num_samples_list": samples,
        "self_iters_list": [runlog.local_steps(r) for r in ordered],
        "elapsed_time_list": elapsed,
        "aggregate_time_list": aggregate,
        "total_samples": sum(samples),
        "elapsed_time": last_time,
        "throughput": ratio(sum(samples), last_time),
        "compute_ratio": None if compute_share is None else 1.0 - compute_share,
        "sent_bytes": sent,
        "received_bytes": received,
        "bytes_per_round": None if None in (sent, received) else ratio(sent + received, len(ordered)),
    }


def logged_total(records, field):
    """The sum of a field every record logs; None when one does not (a log from before it was counted)."""
    values = [r.get(field) for r in records]
    return sum(values) if values and None not in values else None


# ----------------------------------------------------------------------------------------------
# Cluster math


def traffic_mb_per_s(stats, param_bytes, num_workers, rounds, elapsed):
    """(MB/s through the workers' links, sent plus received, whether measured): the bytes every worker logged,
    else, for logs without them, an estimate: every worker pushes and pulls all parameters once per round."""
    if elapsed <= 0:
        return None, False
    logged = [s["sent_bytes"] + s["received_bytes"] for s in stats
              if None not in (s.get("sent_bytes"), s.get("received_bytes"))]
    if stats and len(logged) == len(stats):
        return sum(logged) / elapsed / 1e6, True
    if param_bytes is None:
        return None, False
    return 2.0 * param_bytes * num_workers * rounds / elapsed / 1e6, False


def iter_devices(devices):
    """Yield (node, device, device_summary) in a stable order."""
    for node in sorted(devices):
        for device in sorted(devices[node]):
            yield node, device, devices[node][device]


def pick_accuracy_device(devices):
    """'node/device' of the device with the most accuracy points (the evaluator), or None."""
    best, best_count = None, 0
    for node, device, stats in iter_devices(devices):
        if len(stats["accuracy_points"]) > best_count:
            best, best_count = f"{node}/{device}", len(stats["accuracy_points"])
    return best


def accuracy_points(summary):
    """Accuracy points [[iteration, seconds, accuracy], ...] of a summary's evaluating device."""
    if not summary.get("accuracy_device"):
        return []
    node, device = summary["accuracy_device"].split("/", 1)
    return summary["devices"][node][device]["accuracy_points"]


def evaluator_points(summary):
    """The evaluator process's points [[step, seconds, accuracy], ...] of a summary ([] without one)."""
    return (summary.get("evaluator") or {}).get("points", [])


def summarize_cluster(devices, num_workers, param_bytes, target, standalone=False, validators=()):
    """Cluster-level numbers from {node: {device: summarize_device(...)}}; the validators' summaries (Zeno) count
    in the traffic only."""
    stats = [s for _, _, s in iter_devices(devices)]
    elapsed = max((s["elapsed_time"] for s in stats), default=0.0)
    rounds = max((s["num_rounds"] for s in stats), default=0)
    summary = {"accuracy_device": pick_accuracy_device(devices), "devices": devices}
    points = accuracy_points(summary)
    accuracies = [p[2] for p in points]
    # A standalone run talks to nobody.
    traffic, measured = (0.0, True) if standalone else traffic_mb_per_s(stats + list(validators), param_bytes,
                                                                         num_workers, rounds, elapsed)
    summary.update({
        "cluster_throughput": sum(s["throughput"] or 0.0 for s in stats),
        "elapsed_time": elapsed,
        "num_rounds": rounds,
        "rounds_per_second": ratio(rounds, elapsed),
        "traffic_mb_per_s": traffic,
        "traffic_measured": measured,
        "target_accuracy": target,
        "time_to_accuracy": time_to_reach(points, target),
        "final_accuracy": accuracies[-1] if accuracies else None,
        "best_accuracy": max(accuracies) if accuracies else None,
    })
    return summary


def summarize_evaluator(records, target):
    """The evaluator's curve: points [step, seconds, accuracy] in step order, and its headline numbers."""
    points = sorted([r["step"], float(r["time"]), float(r["accuracy"])] for r in records)
    accuracies = [p[2] for p in points]
    return {
        "points": points,
        "num_checkpoints": len(points),
        "time_to_accuracy": time_to_reach(points, target),
        "final_accuracy": accuracies[-1] if accuracies else None,
        "best_accuracy": max(accuracies) if accuracies else None,
    }


# ----------------------------------------------------------------------------------------------
# Reading the log folders


def evaluation_problem(record):
    """Why a line of the evaluator's log cannot be used, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("step"), int) or isinstance(record.get("step"), bool):
        return "missing or non-integer 'step'"
    for key in ("time", "accuracy"):
        if not is_number(record.get(key)):
            return f"missing or non-numeric '{key}'"
    return None


def read_evaluator_log(mode_dir):
    """Usable records of the run's evaluator log ([] when it has none); bad lines are reported and skipped."""
    path = os.path.join(mode_dir, EVALUATOR_LOG)
    if not os.path.isfile(path):
        return []
    records = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                log.warning("skipping line %d of %s: %s", number, path, error)
                continue
            problem = evaluation_problem(record)
            if problem:
                log.warning("skipping line %d of %s: %s", number, path, problem)
                continue
            records[record["step"]] = record
    return [records[step] for step in sorted(records)]


def mode_folders(network_dir):
    """Mode folders of a network that carry a known mode name, in sorted order."""
    if not os.path.isdir(network_dir):
        return []
    return [name for name in runlog.subfolders(network_dir) if is_known_mode(name)]


# ----------------------------------------------------------------------------------------------
# Assembling one run's summary


def rank_of(device, meta):
    if is_number(meta.get("rank")):
        return int(meta["rank"])
    return runlog.rank_in_folder(device)


def describe_device(device, records, meta):
    stats = summarize_device(records)
    stats["rank"] = rank_of(device, meta)
    stats["slowdown"] = meta.get("slowdown")
    stats["byzantine"] = meta.get("byzantine")
    stats.update(validation_counts(records.values()))
    return stats


VALIDATION_FIELDS = {  # Zeno's iteration-log fields -> the summary's counts
    "layers": ("zeno_accepted_layers", "zeno_layers"),      # sync: each layer of each round's delta
    "updates": ("zeno_accepted_updates", "zeno_judged_updates"),  # async: each gradient
}


def validation_counts(records):
    """Zeno: how many of this worker's updates the validation rule accepted and rejected."""
    records = list(records)
    counts = {}
    for unit, (accepted_key, judged_key) in VALIDATION_FIELDS.items():
        judged = [r for r in records if is_number(r.get(accepted_key)) and is_number(r.get(judged_key))]
        if judged:
            accepted = sum(int(r[accepted_key]) for r in judged)
            counts[f"accepted_{unit}"] = accepted
            counts[f"rejected_{unit}"] = sum(int(r[judged_key]) for r in judged) - accepted
    unjudged = [int(r["zeno_unjudged_updates"]) for r in records if is_number(r.get("zeno_unjudged_updates"))]
    if unjudged:
        counts["unjudged_updates"] = sum(unjudged)
    return counts


def report_gaps(node, device, stats):
    if stats["missing_iterations"]:
        log.warning("%s/%s: missing iterations %s", node, device, compact_ranges(stats["missing_iterations"]))


def compact_ranges(numbers):
    """[1, 2, 3, 7] -> '1-3, 7'."""
    spans = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def first_known(metas, key):
    return next((m[key] for m in metas if m.get(key) is not None), None)


def first_count(metas, key):
    """First positive whole number logged under key, ignoring malformed values."""
    return next((int(m[key]) for m in metas if is_number(m.get(key)) and m[key] > 0), None)


def resolve_model_size(metas, num_params, notes):
    """(num_params, param_bytes): from meta.json, else from the command line, else unknown."""
    num_params = first_count(metas, "num_params") or num_params
    param_bytes = first_count(metas, "param_bytes")
    if param_bytes is None and num_params is not None:
        param_bytes = num_params * BYTES_PER_PARAM
        notes.append(f"param_bytes assumed {BYTES_PER_PARAM} bytes per parameter")
    if param_bytes is None:
        notes.append("param_bytes unknown (no meta.json, no --num-params): traffic not estimated")
    return num_params, param_bytes


def summarize_mode(network_dir, mode, target=DEFAULT_TARGET, num_params=None):
    """Read every device folder of one run and return its summary dict."""
    algorithm = algorithm_name(mode)
    mode_dir = os.path.join(network_dir, mode)
    if not os.path.isdir(mode_dir):
        raise SummaryError(f"no such log folder: {mode_dir}")
    devices, metas, validators, validator_names = {}, [], [], []
    for node, device, path in runlog.device_folders(mode_dir):
        device_log = runlog.DeviceLog(path)
        records, meta = device_log.rounds, device_log.meta
        if not records:
            log.warning("skipping %s: no usable iter-<N>.txt files", path)
            continue
        if meta.get("role") == "validator":  # it trains on held-out data: not part of the cluster's throughput
            validators.append(summarize_device(device_log.rounds))
            validator_names.append(f"{node}/{device}")
            continue
        stats = describe_device(device, records, meta)
        report_gaps(node, device, stats)
        devices.setdefault(node, {})[device] = stats
        metas.append(meta)
    if not devices:
        raise SummaryError(f"no iteration logs under {mode_dir}")
    notes = []
    num_params, param_bytes = resolve_model_size(metas, num_params, notes)
    if param_bytes is None:
        log.warning("%s: %s", mode_dir, notes[-1])
    num_workers = first_count(metas, "num_workers") or sum(len(d) for d in devices.values())
    cluster = summarize_cluster(devices, num_workers, param_bytes, target,
                                standalone=not catalog_entry(mode).cluster, validators=validators)
    header = {
        "mode": mode,
        "algorithm": algorithm,
        "non_iid": split_mode(mode)[1],
        "attacked": is_attacked(mode),
        "byzantine_workers": sum(1 for m in metas if m.get("byzantine")),
        "validators": validator_names,
        "network": os.path.basename(os.path.normpath(network_dir)),
        "dataset": first_known(metas, "dataset"),
        "num_workers": num_workers,
        "num_params": num_params,
        "param_bytes": param_bytes,
        "links": runlog.links_described(mode_dir),
        "notes": notes,
    }
    evaluations = read_evaluator_log(mode_dir)
    if evaluations:
        cluster["evaluator"] = summarize_evaluator(evaluations, target)
    return {**header, **cluster}


def summary_path(network_dir, mode):
    return os.path.join(network_dir, mode, summary_file_name(mode))


def write_summary(summary, network_dir, mode):
    path = summary_path(network_dir, mode)
    write_json(path, summary, indent=1)
    return path


def load_summary(network_dir, mode):
    """A previously written summary, or None when absent or unreadable."""
    path = summary_path(network_dir, mode)
    if not os.path.exists(path):
        return None
    summary = runlog.read_json(path, "summary")
    return summary if isinstance(summary, dict) and "devices" in summary else None


def format_cell(value, spec):
    return "-" if value is None else format(value, spec)


def text_table(headers, rows):
    """Columns padded to their widest cell; the first left-aligned, the others right-aligned."""
    lines = [headers] + rows
    widths = [max(len(str(cell)) for cell in column) for column in zip(*lines)]
    return "\n".join("  ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                               for i, (cell, w) in enumerate(zip(line, widths))) for line in lines)


# ----------------------------------------------------------------------------------------------
# Command line


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def logs_parser(description):
    """A command line that starts from the logs of one network: <base>/<network>/."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("-b", "--base-dir", default="logs", help="root of the logs (default: logs)")
    parser.add_argument("-n", "--network", required=True, help="network folder, e.g. lenet or resnet18-v1")
    return parser


def parse_args(argv):
    parser = logs_parser("Summarize <base>/<network>/<mode>/<node>/<device>/iter-<N>.txt logs into one JSON per run.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("-m", "--mode", help="mode folder, e.g. esync, sync, async-niid")
    which.add_argument("--all", action="store_true", help="summarize every mode folder of the network")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET,
                        help=f"accuracy for time_to_accuracy (default: {DEFAULT_TARGET})")
    parser.add_argument("--num-params", type=positive_int,
                        help="parameter count, for logs without meta.json (traffic estimate)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress as well as problems")
    return parser.parse_args(argv)


def modes_to_summarize(args, network_dir):
    if not os.path.isdir(network_dir):
        raise SummaryError(f"no such log folder: {network_dir}")
    if not args.all:
        catalog_entry(args.mode)
        return [args.mode]
    folders = [m for m in mode_folders(network_dir) if runlog.has_rounds(os.path.join(network_dir, m))]
    if not folders:
        raise SummaryError(f"no mode folder with iteration logs under {network_dir}")
    return folders


def summarize_modes(network_dir, folders, target, num_params):
    """Write one summary per mode folder; with several folders a failing one is reported, not fatal."""
    written = []
    for mode in folders:
        try:
            summary = summarize_mode(network_dir, mode, target, num_params)
        except SummaryError as error:
            if len(folders) == 1:
                raise
            log.error("%s", error)
            continue
        written.append(write_summary(summary, network_dir, mode))
    if not written:
        raise SummaryError(f"no usable iteration logs under {network_dir}")
    return written


def run_command(prog, verbose, command, usage_error):
    """Run a command-line tool's work: `usage_error` (bad input) ends it with one line and exit 2, a file that
    cannot be read or written with one line and exit 1."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return command()
    except (usage_error, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, usage_error) else 1


def main(argv=None):
    args = parse_args(argv)
    network_dir = os.path.join(args.base_dir, args.network)

    def summarize():
        modes = modes_to_summarize(args, network_dir)
        for path in summarize_modes(network_dir, modes, args.target, args.num_params):
            print(path)
        return 0

    return run_command("summary.py", args.verbose, summarize, SummaryError)
