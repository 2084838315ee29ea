"""Summarize the per-device iteration logs of one training run into a single JSON file (the numbers themselves:
analysis/metrics.py).

    python summary.py -b logs -n lenet -m esync
    python summary.py -b logs -n lenet --all --target 0.9
    python summary.py -b logs -n resnet18-v1 -m sync --num-params 11689512   # original logs, no meta.json

Workers log one JSON object per global iteration at
<base>/<network>/<mode>/<node>/<device>/iter-<N>.txt; the summary is written beside the node folders, named
after the mode's summary name in training/modes.py (esync -> ESync.json, sync-niid -> Sync-Non-IID.json,
zeno-async -> ZenoAsync.json, ...). An evaluator process's log beside the node folders
(<base>/<network>/<mode>/evaluator.jsonl, see training/evaluator.py) becomes the summary's "evaluator" entry: its
accuracy points [step, seconds, accuracy] and their final, best and time-to-target numbers, which are then the
summary's own (accuracy_source "evaluator"; "worker" where the evaluating worker's in-loop evaluations are all
there is).
"""
import json
import logging
import os
import statistics

from analysis.cli import logs_parser, positive_int, run_command
from analysis.metrics import (
    accuracy_numbers,
    iter_devices,
    summarize_cluster,
    summarize_device,
    summarize_evaluator,
    validation_counts,
)
from training import modes, runlog
from training.evaluator import EVALUATOR_LOG
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


def run_evaluations(mode_dir):
    """A run's evaluations, {time, accuracy[, diverged]} each: its evaluator's log, or where it had no evaluator
    (rank 0 evaluating in its loop, as on a virtual clock) its summary's accuracy curve ([] without either)."""
    evaluations = read_evaluator_log(mode_dir)
    if evaluations:
        return evaluations
    found = load_summary(os.path.dirname(mode_dir), os.path.basename(mode_dir))
    if not found:
        return []
    from analysis import metrics

    evaluations = [{"time": seconds, "accuracy": accuracy} for _, seconds, accuracy in metrics.curve_points(found)]
    if evaluations and found.get("diverged"):
        evaluations[-1]["diverged"] = found["diverged"]
    return evaluations


def mode_folders(network_dir):
    """Mode folders of a network that carry a known mode name, in sorted order."""
    if not os.path.isdir(network_dir):
        return []
    return [name for name in runlog.subfolders(network_dir) if is_known_mode(name)]


# ----------------------------------------------------------------------------------------------
# Assembling one run's summary


def index_of(device, meta):
    """The device's position in its job: meta.json's, else the rank of older logs, else the folder's name."""
    for key in ("worker_index", "rank"):
        if is_number(meta.get(key)):
            return int(meta[key])
    return runlog.index_in_folder(device)


LOCAL_STEP_PHASES = runlog.OWN_STEP_PHASES + (runlog.CHECK_READY,)  # a step's own work and its question to the rules

def describe_device(device, records, meta):
    stats = summarize_device(records)
    stats["index"] = index_of(device, meta)
    stats["rank"] = meta.get("rank")
    stats["slowdown"] = meta.get("slowdown")
    stats["byzantine"] = meta.get("byzantine")
    ordered = [records[i] for i in sorted(records)]
    stats["compute_seconds"] = runlog.median_step_seconds(ordered, (runlog.FORWARD_BACKWARD,))
    stats["local_step_seconds"] = runlog.median_step_seconds(ordered, LOCAL_STEP_PHASES)
    stats.update(validation_counts(records.values()))
    return stats


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


def clock_kind(meta):
    """The kind of clock a worker's times were read from: real for the logs written before meta.json said."""
    return (meta.get("clock") or {}).get("kind", runlog.REAL_CLOCK)


def check_one_job(workers, mode_dir, partial=False):
    """SummaryError unless the workers' folders (`workers`: [(node/folder, meta)]) are every worker of one job: one
    job id and worker count, each position 0 to N - 1 once. With `partial`, missing workers are allowed: then
    {"workers": found, "of": N, "missing": [positions]} (None for a whole run). Logs without meta.json (the original
    scripts') say nothing of their job and are taken as they are where none has one; beside folders that do, a folder
    without one is refused (it may be another job's) unless `partial`."""
    described = [(name, meta) for name, meta in workers if is_number(meta.get("num_workers"))]
    if not described:
        return None
    silent = [name for name, meta in workers if not is_number(meta.get("num_workers"))]
    if silent and not partial:
        raise SummaryError(f"{mode_dir}: {', '.join(silent)} {'has' if len(silent) == 1 else 'have'} no meta.json "
                           "beside workers that do, so nothing says it is one of their job's (move it out, or "
                           "summarize what is here with --partial)")
    clocks = {clock_kind(meta) for _, meta in workers}
    if len(clocks) > 1:
        virtual = [name for name, meta in workers if clock_kind(meta) == runlog.VIRTUAL_CLOCK]
        raise SummaryError(f"{mode_dir} mixes runs on a virtual clock ({', '.join(virtual)}) with runs in real time: "
                           "their times cannot be compared")
    jobs = {}
    for name, meta in described:
        jobs.setdefault((meta.get("job_id"), int(meta["num_workers"])), []).append(name)
    if len(jobs) > 1:
        parts = "; ".join(f"job {job or '(no id)'} of {n} workers: {', '.join(names)}"
                          for (job, n), names in sorted(jobs.items(), key=lambda item: -len(item[1])))
        raise SummaryError(f"{mode_dir} mixes the logs of {len(jobs)} jobs ({parts}): move the foreign folders out")
    (_, expected), = jobs
    by_index = {}
    for name, meta in described:
        by_index.setdefault(index_of(name.split("/", 1)[1], meta), []).append(name)
    foreign = [names for index, names in sorted(by_index.items(), key=lambda item: str(item[0]))
               if len(names) > 1 or index is None or not 0 <= index < expected]
    if foreign:
        raise SummaryError(f"{mode_dir}: {', '.join(sum(foreign, []))} cannot all be workers of one job of "
                           f"{expected} (two folders of one position, or a position outside 0-{expected - 1})")
    missing = [index for index in range(expected) if index not in by_index]
    if missing and not partial:
        raise SummaryError(f"{mode_dir}: worker{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(map(str, missing))} of the job's {expected} left no usable logs here "
                           f"(collect them, or summarize what is here with --partial)")
    return {"workers": len(by_index), "of": expected, "missing": missing} if missing else None


def summarize_mode(network_dir, mode, target=DEFAULT_TARGET, num_params=None, partial=False):
    """Read every device folder of one run and return its summary dict; `partial`: allow missing workers (the
    summary says which)."""
    algorithm = algorithm_name(mode)
    mode_dir = os.path.join(network_dir, mode)
    if not os.path.isdir(mode_dir):
        raise SummaryError(f"no such log folder: {mode_dir}")
    devices, metas, names, validators, validator_names = {}, [], [], [], []
    diverged = None
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
        diverged = diverged or next((r[runlog.DIVERGED] for r in records.values() if r.get(runlog.DIVERGED)), None)
        stats = describe_device(device, records, meta)
        report_gaps(node, device, stats)
        devices.setdefault(node, {})[device] = stats
        metas.append(meta)
        names.append(f"{node}/{device}")
    if not devices:
        raise SummaryError(f"no iteration logs under {mode_dir}")
    incomplete = check_one_job(list(zip(names, metas)), mode_dir, partial)
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
        "device_emulation": runlog.devices_described(mode_dir),
        "restarts": runlog.launcher_record(mode_dir, "restarts") or [],
        "clock": next((m["clock"] for m in metas if m.get("clock")), {"kind": runlog.REAL_CLOCK}),
        "notes": notes,
        "partial": incomplete,
    }
    cluster.update(fast_devices_compute(devices, mode_dir))
    evaluations = read_evaluator_log(mode_dir)
    cluster["accuracy_source"] = "evaluator" if evaluations else "worker"
    if evaluations:  # the headline numbers are the evaluator's, whose model was tested off the training path
        cluster["evaluator"] = summarize_evaluator(evaluations, target)
        cluster.update(accuracy_numbers(cluster["evaluator"]["points"], target))
        diverged = next((r["diverged"] for r in evaluations if r.get("diverged")), diverged)
    cluster["diverged"] = diverged  # why the run stopped as diverged (training/faults/divergence.py), else None
    return {**header, **cluster}


def fast_devices_compute(devices, mode_dir):
    """The fastest devices' median forward and backward pass in the run, and the one the launcher's --comm-ratio
    probe measured alone on the same device before it (None without a probe): their ratio says whether the run met
    the regime the links were set for."""
    stats = [s for _, _, s in iter_devices(devices) if s.get("compute_seconds") is not None]
    fastest = min((s.get("slowdown") or 1.0 for s in stats), default=None)
    steps = [s["compute_seconds"] for s in stats if (s.get("slowdown") or 1.0) == fastest]
    regime = runlog.launcher_record(mode_dir, "regime") or {}
    local = [s["local_step_seconds"] for s in stats
             if (s.get("slowdown") or 1.0) == fastest and s.get("local_step_seconds") is not None]
    return {"fast_compute_seconds": statistics.median(steps) if steps else None,
            "fast_local_step_seconds": statistics.median(local) if local else None,
            "probe_compute_seconds": regime.get("fast_compute_seconds")}


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


# ----------------------------------------------------------------------------------------------
# Command line


def parse_args(argv):
    parser = logs_parser("Summarize <base>/<network>/<mode>/<node>/<device>/iter-<N>.txt logs into one JSON per run.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("-m", "--mode", help="mode folder, e.g. esync, sync, async-niid")
    which.add_argument("--all", action="store_true", help="summarize every mode folder of the network")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET,
                        help=f"accuracy for time_to_accuracy (default: {DEFAULT_TARGET})")
    parser.add_argument("--num-params", type=positive_int,
                        help="parameter count, for logs without meta.json (traffic estimate)")
    parser.add_argument("--partial", action="store_true",
                        help="summarize a run some of whose workers left no logs here (the summary, tables and "
                             "figures say so); without it such a run is refused")
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


def summarize_modes(network_dir, folders, target, num_params, partial=False):
    """Write one summary per mode folder; with several folders a failing one is reported, not fatal."""
    written = []
    for mode in folders:
        try:
            summary = summarize_mode(network_dir, mode, target, num_params, partial)
        except SummaryError as error:
            if len(folders) == 1:
                raise
            log.error("%s", error)
            continue
        written.append(write_summary(summary, network_dir, mode))
    if not written:
        raise SummaryError(f"no usable iteration logs under {network_dir}")
    return written


def main(argv=None):
    args = parse_args(argv)
    network_dir = os.path.join(args.base_dir, args.network)

    def summarize():
        modes = modes_to_summarize(args, network_dir)
        for path in summarize_modes(network_dir, modes, args.target, args.num_params, args.partial):
            print(path)
        return 0

    return run_command("summary.py", args.verbose, summarize, SummaryError)
