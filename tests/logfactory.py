"""Synthetic training logs in the worker layout, with numbers simple enough for tests to recompute.

write_run(...) writes <base>/<network>/<mode>/<node>/<device>/iter-<N>.txt (plus meta.json in our format)
and returns {(node, device): {round: record}} so a test can derive every expected value itself. Three generations
(training/runlog.py): ours (the default), this project's before log_format 2 (legacy=True: rounds in files from 0,
num_iters the local steps) and the original scripts' (original=True: no meta.json).
"""
import json
import os

NETWORK = "lenet"
NODES = ("host1", "host2")
DEVICES = ("cpu", "gpu0", "gpu1")
ORIGINAL_NODES = ("cloud1", "cloud3")
MODES = ("esync", "sync", "async", "dcasgd")
NUM_PARAMS = 44426
BATCH_SIZE = 32
ROUNDS = 8
# Accuracy climbs by this much per global iteration, per mode, so the curves and time-to-target differ.
ACCURACY_GAIN = {"esync": 0.09, "sync": 0.06, "async": 0.05, "dcasgd": 0.055, "local": 0.07}


def device_folder(device, rank, original):
    return device if original else f"{device}-rank{rank}"


def local_steps(mode, rank):
    # ESync lets faster devices run more local steps; every other algorithm does one per global iteration.
    return 1 + rank % 3 if mode.startswith("esync") else 1


def step_timings(mode, steps, aggregate, original):
    aggregate_key = "global update" if mode.startswith("esync") else "global aggregate"
    timings = {}
    for step in range(steps):
        timing = {"get_batch": 0.001, "forward and backward": 0.01 * (step + 1)}
        if mode.startswith("esync"):
            timing.update({"local update": 0.0005, "check ready": 0.0006})
        timings[str(step)] = timing
    timings[str(steps - 1)][aggregate_key] = aggregate
    if not original:
        timings[str(steps - 1)]["evaluation"] = 0.004
    return timings


def device_records(mode, rank, rounds, evaluates=False, original=False, legacy=False):
    """{round: record} of one device, rounds from 1; the evaluating device logs accuracy every other round."""
    steps = local_steps(mode, rank)
    aggregate = 0.02 * (rank % 3 + 1)
    seconds_per_round = 0.25 * (rank + 1) + aggregate
    gain = ACCURACY_GAIN.get(mode.replace("-niid", ""), 0.05)
    records = {}
    for index in range(rounds):
        iteration = index + 1
        record = {
            "num_iters": steps if legacy else iteration,
            "time": step_timings(mode, steps, aggregate, original),
            "num_samples": BATCH_SIZE * steps,
            "total_time": round(seconds_per_round * (index + 1), 6),
        }
        if evaluates and index % 2 == 0:
            record["accuracy"] = round(min(0.99, 0.5 + gain * index), 4)
        if not original:
            record.update({"rank": rank, "bytes_pushed": NUM_PARAMS * 4})
        records[iteration] = record
    return records


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle)


def meta_for(mode, network, node, device, rank, num_workers, legacy=False, job_id=None):
    return {**({} if legacy else {"log_format": 2}), **({"job_id": job_id} if job_id else {}),
            "rank": rank, "num_workers": num_workers, "mode": mode, "network": network, "dataset": "mnist-5k",
            "device": device, "node": node, "batch_size": BATCH_SIZE, "num_params": NUM_PARAMS,
            "param_bytes": NUM_PARAMS * 4, "slowdown": 1.0 + 0.5 * rank, "emulated_slowdown": rank > 0,
            "non_iid": mode.endswith("-niid")}


def write_run(base, mode, network=NETWORK, nodes=NODES, devices=DEVICES, rounds=ROUNDS, original=False,
              legacy=False, job_id=None):
    """Write one run's logs (its workers' meta.json naming `job_id` where given); returns {(node, device folder):
    {round: record}}."""
    file_offset = -1 if legacy else 0  # the legacy generation numbered its files from 0
    num_workers = len(nodes) * len(devices)
    written = {}
    for node_index, node in enumerate(nodes):
        for device_index, device in enumerate(devices):
            rank = node_index * len(devices) + device_index
            folder = os.path.join(base, network, mode, node, device_folder(device, rank, original))
            os.makedirs(folder, exist_ok=True)
            records = device_records(mode, rank, rounds, evaluates=rank == 0, original=original, legacy=legacy)
            for iteration, record in records.items():
                write_json(os.path.join(folder, f"iter-{iteration + file_offset}.txt"), record)
            if not original:
                write_json(os.path.join(folder, "meta.json"), meta_for(mode, network, node, device, rank,
                                                                      num_workers, legacy, job_id))
            written[(node, os.path.basename(folder))] = records
    return written


def write_runs(base, modes=MODES, **options):
    """{mode: write_run(...)} for several modes."""
    return {mode: write_run(base, mode, **options) for mode in modes}


def expected_time_to_accuracy(written, target):
    """Seconds until the evaluating device first logged an accuracy >= target, from the records written."""
    for records in written.values():
        for iteration in sorted(records):
            accuracy = records[iteration].get("accuracy")
            if accuracy is not None and accuracy >= target:
                return records[iteration]["total_time"]
    return None
