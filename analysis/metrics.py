"""The numbers of one run: each device's from its iteration records (runlog.DeviceLog reads them), the cluster's
from its devices' numbers, and the curve of an evaluator process; analysis/summary.py puts them together into the
run's summary."""
from training import runlog
from training.runlog import is_number

# ----------------------------------------------------------------------------------------------
# Per device


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


def accuracy_numbers(points, target):
    """The time to the target, the final and the best accuracy of points [[iteration, seconds, accuracy], ...]."""
    accuracies = [p[2] for p in points]
    return {
        "time_to_accuracy": time_to_reach(points, target),
        "final_accuracy": accuracies[-1] if accuracies else None,
        "best_accuracy": max(accuracies) if accuracies else None,
    }


def ratio(numerator, denominator):
    return numerator / denominator if denominator > 0 else None


PLATEAU_BAND = 0.01  # accuracy: a curve whose last quarter moved less than this from the quarter before levelled off


def plateau(points):
    """{accuracy, levelled}: the mean accuracy of points [[iteration, seconds, accuracy], ...] over the last quarter
    of the curve's time, and whether the curve had levelled off: that mean within PLATEAU_BAND of the third
    quarter's, each quarter holding at least 2 evaluations."""
    end = points[-1][1] if points else 0.0
    last = [a for _, t, a in points if t >= 0.75 * end]
    before = [a for _, t, a in points if 0.5 * end <= t < 0.75 * end]
    accuracy = sum(last) / len(last) if last else None
    levelled = len(last) >= 2 and len(before) >= 2 and abs(accuracy - sum(before) / len(before)) <= PLATEAU_BAND
    return {"accuracy": accuracy, "levelled": levelled}


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
    applied = applied_samples(ordered)
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
        "applied_samples": applied,
        "elapsed_time": last_time,
        "throughput": ratio(sum(samples), last_time),
        "applied_throughput": ratio(applied, last_time),
        "compute_ratio": None if compute_share is None else 1.0 - compute_share,
        "sent_bytes": sent,
        "received_bytes": received,
        "bytes_per_round": None if None in (sent, received) else ratio(sent + received, len(ordered)),
        "staleness_list": [r[runlog.STALENESS] for r in ordered if is_number(r.get(runlog.STALENESS))],
    }


def applied_samples(records):
    """The samples whose update reached the model: a round's, less a step the backup workers' rule dropped (it came
    too late) and the layers of a delta Zeno's rule rejected; of Zeno++'s gradients, the share it accepted of those
    it judged."""
    applied = 0.0
    for r in records:
        if r.get(runlog.DROPPED) is True:
            continue
        layers, accepted = r.get("zeno_layers"), r.get("zeno_accepted_layers")
        applied += r["num_samples"] * (accepted / layers if is_number(layers) and layers and is_number(accepted)
                                       else 1.0)
    judged = sum(r["zeno_judged_updates"] for r in records if is_number(r.get("zeno_judged_updates")))
    if judged:
        accepted = sum(r["zeno_accepted_updates"] for r in records if is_number(r.get("zeno_accepted_updates")))
        applied *= accepted / judged
    return applied


def logged_total(records, field):
    """The sum of a field every record logs; None when one does not (a log from before it was counted)."""
    values = [r.get(field) for r in records]
    return sum(values) if values and None not in values else None


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


# ----------------------------------------------------------------------------------------------
# The cluster


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


def curve_points(summary):
    """The accuracy points a run is judged by: its evaluator process's where it had one (the model tested off the
    training path), else its evaluating worker's."""
    return evaluator_points(summary) or accuracy_points(summary)


def summarize_cluster(devices, num_workers, param_bytes, target, standalone=False, validators=()):
    """Cluster-level numbers from {node: {device: summarize_device(...)}}; the validators' summaries (Zeno) count
    in the traffic only."""
    stats = [s for _, _, s in iter_devices(devices)]
    elapsed = max((s["elapsed_time"] for s in stats), default=0.0)
    rounds = max((s["num_rounds"] for s in stats), default=0)
    summary = {"accuracy_device": pick_accuracy_device(devices), "devices": devices}
    points = accuracy_points(summary)
    # A standalone run talks to nobody.
    traffic, measured = (0.0, True) if standalone else traffic_mb_per_s(stats + list(validators), param_bytes,
                                                                         num_workers, rounds, elapsed)
    summary.update({
        "cluster_throughput": sum(s["throughput"] or 0.0 for s in stats),
        "applied_throughput": sum(s.get("applied_throughput") or 0.0 for s in stats),
        "elapsed_time": elapsed,
        "num_rounds": rounds,
        "rounds_per_second": ratio(rounds, elapsed),
        "traffic_mb_per_s": traffic,
        "traffic_measured": measured,
        "target_accuracy": target,
        **accuracy_numbers(points, target),
        "staleness": staleness_quantiles([v for s in stats for v in s.get("staleness_list", ())]),
    })
    return summary


def staleness_quantiles(values):
    """{median, p90} of the staleness every round of an asynchronous scheme logged (None for the others)."""
    if not values:
        return None
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "rounds": len(ordered)}


def summarize_evaluator(records, target):
    """The evaluator's curve: points [step, seconds, accuracy] in step order, and its headline numbers."""
    points = sorted([r["step"], float(r["time"]), float(r["accuracy"])] for r in records)
    return {"points": points, "num_checkpoints": len(points), **accuracy_numbers(points, target)}
