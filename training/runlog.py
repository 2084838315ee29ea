"""The run-log format: what every worker writes each round, and the one reader of it.

Layout, as in the original ESync scripts: <log_dir>/<node>/<device folder>/iter-<N>.txt, one file per round
(global iteration) N = 1, 2, ..., with meta.json beside them describing the worker and the job. A device folder
is the device's name alone on a standalone run, <device>-worker<I> for the device at position I of a cluster
(launch.py's --devices and --slowdown entry I; by hand main.py's --worker-index, the worker's rank by default), and
<device>-worker<I>-validator for Zeno's validator. Folders of this project's logs from before devices were named by
position, <device>-rank<R>, are read as worker R. The launcher and the summaries keep a run's logs in
<logs>/<network>/<mode>[-attack][-niid]/ (run_folder).

A round's file is one JSON object: `num_iters` (N), `time` (per local step "0", "1", ...: the seconds of each
phase; the round's local steps are len(time)), `num_samples`, `total_time` (seconds since the worker started
training; a resumed job continues from its checkpoint's), `accuracy` when this worker evaluated, `sent_bytes` and
`received_bytes` (the payload its worker exchanged during the round) in a cluster, and what a scheme adds (a
weights digest, Zeno's counts). The aggregation is timed in the last local step: ESync's as
`global update`, every other scheme's as `global aggregate`.

Three generations of logs are read, told apart by meta.json:
- the original scripts: no meta.json; rounds from 1, `num_iters` the round (the worker's own count in ASGD);
- this project before `log_format` 2: meta.json without `log_format`; rounds from 0, `num_iters` the local steps;
- now: meta.json with `log_format` 2.
The reader numbers every round from 1 and counts local steps as len(time) in all three.
"""
import glob
import json
import logging
import math
import os
import queue
import re
import statistics
import threading

from training import files
from training.faults import failures
from training.files import write_json

log = logging.getLogger(__name__)

FORMAT = 2

# Phases of a local step (keys of each entry of `time`).
GET_BATCH = "get_batch"
FORWARD_BACKWARD = "forward and backward"
LOCAL_UPDATE = "local update"
EMULATED_SLOWDOWN = "emulated slowdown"
CHECK_READY = "check ready"             # asking the state server whether the round is over
GLOBAL_UPDATE = "global update"         # ESync's aggregation
GLOBAL_AGGREGATE = "global aggregate"   # every other scheme's aggregation
ABANDONED_STEP = "abandoned step"       # ESync's nonblocking policy: a step cut short by READY, not applied
EVALUATION = "evaluation"
CHECKPOINT = "checkpoint"
SNAPSHOT = "snapshot"  # rank 0 copying the model for the evaluator (training/snapshots.py)
AGGREGATION_PHASES = (GLOBAL_UPDATE, GLOBAL_AGGREGATE)
SENT_BYTES = "sent_bytes"             # a cluster worker's payload of the round, by its transport's count
RECEIVED_BYTES = "received_bytes"
TRAFFIC_FIELDS = (SENT_BYTES, RECEIVED_BYTES)
OWN_STEP_PHASES = (GET_BATCH, FORWARD_BACKWARD, LOCAL_UPDATE, EMULATED_SLOWDOWN)  # a worker's own work
COMPUTE_WARMUP = 10  # the first steps of a device, which MXNet's first calls slow, left out of its median step
# A planned ESync round's fields (the plan and adaptive policies): coordination/records.py (PLANNED_STEPS, ...),
# whose worker sides log them.
AVERAGE_IN_FLIGHT = "average_in_flight"  # --overlap: seconds the average applied in the round travelled
# A round's fields under backup: the job's step its gradient was computed for, whether that step dropped it (late),
# and how many steps the job had applied since then when it learnt so.
SAT_OUT = "sat_out"  # a round this worker took no local step in and only joined the aggregation (tifl): its "time"
#                     holds one entry, the aggregation's, which local_steps() does not count
SUB_MODEL = "sub_model"  # feddrop: whether the worker trained a sub-model with units left out in the round
FASTEST_STEPS = "fastest_steps"  # feddrop, first round: each rank's fastest step (s), from which the slowest drop
TIER = "tier"  # tifl: the ranks of the tier that trained in the round (null: everyone)
BACKUP_STEP = "step"
# lb-bsp: the round's batch (samples of its one step) and whether its aggregation made a new batch plan.
BATCH = "batch"
REPLANNED = "replanned"
WEIGHTS_DIGEST = "weights_digest"  # --digest-weights: a fingerprint of the weights after the aggregation
LR_FACTOR = "lr_factor"            # the learning-rate schedule's factor, where it is not constant
DIVERGED = "diverged"              # the round a run stopped in because it diverged (training/faults/divergence.py): why
STALENESS = "staleness"  # asynchronous schemes: others' pushes applied between this worker's pull and its push
DROPPED = "dropped"
LATE_BY = "late_by"

PROCESSES_FOLDER = "processes"  # beside a run's node folders (the launcher's): each process's output and PIDs
CHECKPOINTS_FOLDER = "checkpoints"  # beside them too, with the launcher's --max-restarts: a folder per run
NETWORK_FILE = "network.json"   # in PROCESSES_FOLDER: the links the run had and, when shaped, what each carried
SNAPSHOT_FOLDER = "snapshots"    # beside them too, with the launcher's evaluator: worker 0's snapshots it tests
META_FILE = "meta.json"
FINAL_MODEL_FILE = "model-final.params"
WORKER_FILES = {META_FILE, FINAL_MODEL_FILE}   # what a worker writes beside its rounds
ROUND_FILE = re.compile(r"^iter-(\d+)\.txt$")
INDEX = re.compile(r"-(?:worker|rank)(\d+)(?:-[a-z]+)?$")
VALIDATOR_SUFFIX = "-validator"
ATTACK_SUFFIX = "-attack"   # a run with Byzantine workers: <mode>-attack[-niid]
NON_IID_SUFFIX = "-niid"    # a run on the non-i.i.d. partition


# ----------------------------------------------------------------------------------------------
# Folder and file names


def run_folder(mode, attacked=False, non_iid=False):
    """A run's folder under <logs>/<network>/: 'esync', 'sync-niid', 'zeno-attack-niid'."""
    return mode + (ATTACK_SUFFIX if attacked else "") + (NON_IID_SUFFIX if non_iid else "")


def split_run_folder(name):
    """'zeno-attack-niid' -> ('zeno', True, True); 'sync' -> ('sync', False, False)."""
    base, non_iid = _strip(name, NON_IID_SUFFIX)
    mode, attacked = _strip(base, ATTACK_SUFFIX)
    return mode, attacked, non_iid


def _strip(name, suffix):
    return (name[:-len(suffix)], True) if name.endswith(suffix) else (name, False)


def device_folder(device, index=None, role="worker"):
    """'cpu' (no cluster), 'cpu-worker1', 'cpu-worker4-validator'."""
    if index is None:
        return device
    return f"{device}-worker{index}" + ("" if role == "worker" else f"-{role}")


def index_in_folder(name):
    """The device's position a folder name gives ('cpu-worker1', or the older 'cpu-rank1': 1), or None."""
    match = INDEX.search(name)
    return int(match.group(1)) if match else None


def without_index(name):
    """'cpu-worker1' -> 'cpu': the device alone."""
    return INDEX.sub("", name)


def is_validator_folder(name):
    return name.endswith(VALIDATOR_SUFFIX)


def round_path(folder, n):
    return os.path.join(folder, f"iter-{n}.txt")


# ----------------------------------------------------------------------------------------------
# Writing


class RunLogWriter:
    """One worker's device folder: meta.json, then a file per round.

    A round's file is written by a thread of its own: creating and renaming a file costs about 0.5 ms here, 8 % of
    a lenet step, which would otherwise sit between two rounds. The record is encoded on the caller's thread, as it
    is when write() is called. flush() waits until every round handed over is on disk and raises what writing one
    raised; close() ends the thread."""

    def __init__(self, log_dir, node, folder_name, meta, completed_rounds=0, in_thread=True):
        """Rounds after `completed_rounds` replace an earlier run's; a resumed job keeps those before them. Without
        `in_thread` (a device under a CPU quota, whose every thread shares it while it computes) write() writes."""
        self.folder = os.path.join(log_dir, node, folder_name)
        os.makedirs(self.folder, exist_ok=True)
        stale = [path for path in glob.glob(os.path.join(self.folder, "iter-*.txt"))
                 if _file_number(path) > completed_rounds]
        # Files an earlier run was writing when it was killed (training.files.atomic_write's hidden temporaries).
        stale += glob.glob(os.path.join(self.folder, ".*.tmp"))
        for path in stale:  # only this worker's own folder: an earlier run of the same worker slot
            os.unlink(path)
        if stale:
            log.info("removed %d round logs (or unfinished files) of an earlier run from %s", len(stale),
                     self.folder)
        write_json(os.path.join(self.folder, META_FILE), {**meta, "log_format": FORMAT})
        self._pending = queue.Queue()
        self._failure = None
        self._writer = threading.Thread(target=self._write_rounds, name="round-logs", daemon=True)
        if in_thread:
            self._writer.start()  # and a process that ends at once (failures.end_now) writes what is queued first
            self._forget_at_end = failures.before_ending(self._write_pending)

    def write(self, n, step_times, num_samples, total_time, accuracy=None, **extra):
        """Round n (from 1): `step_times` holds each local step's {phase: seconds}."""
        self._raise_failure()
        record = {
            "num_iters": n,
            "time": {str(i): t for i, t in enumerate(step_times)},
            "num_samples": num_samples,
            "total_time": round(total_time, 6),
        }
        if accuracy is not None:
            record["accuracy"] = accuracy
        record.update(extra)
        written = (round_path(self.folder, n), json.dumps(record, separators=(",", ":")))
        if self._writer.is_alive():
            self._pending.put(written)
        else:
            files.write_text(*written)

    def flush(self):
        """Return once every round handed to write() is on disk; raise what writing one raised."""
        self._pending.join()
        self._raise_failure()

    def close(self):
        """Write what is pending and end the writer's thread (a failure is left to flush())."""
        self._write_pending()

    def _write_pending(self, seconds=None):
        if self._writer.is_alive() and self._writer is not threading.current_thread():
            self._forget_at_end()
            self._pending.put(None)
            self._writer.join(seconds)

    def path(self, name):
        return os.path.join(self.folder, name)

    def _write_rounds(self):
        while True:
            item = self._pending.get()
            try:
                if item is None:
                    return
                if self._failure is None:
                    files.write_text(*item)
            except Exception as error:  # handed to the training loop at its next write() or flush()
                self._failure = error
            finally:
                self._pending.task_done()

    def _raise_failure(self):
        if self._failure is not None:
            raise self._failure


def _file_number(path):
    match = ROUND_FILE.match(os.path.basename(path))
    return int(match.group(1)) if match else -1


# ----------------------------------------------------------------------------------------------
# One round


def is_number(value):
    """A finite int or float; JSON booleans and NaN/Infinity do not count."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def round_problem(record):
    """Why a round's record cannot be used, or None when it is fine."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for key in ("num_samples", "total_time"):
        if not is_number(record.get(key)):
            return f"missing or non-numeric '{key}'"
    steps = record.get("time")
    if not isinstance(steps, dict) or not steps or not all(isinstance(s, dict) for s in steps.values()):
        return "missing or malformed 'time'"
    if any(not is_number(seconds) for s in steps.values() for seconds in s.values()):
        return "non-numeric phase time"
    for key in ("num_iters", "accuracy", *TRAFFIC_FIELDS):
        if key in record and not is_number(record[key]):
            return f"non-numeric '{key}'"
    return None


def local_steps(record):
    return 0 if record.get(SAT_OUT) else len(record["time"])


def phase_seconds(record, phases):
    return float(sum(step.get(phase, 0.0) for step in record["time"].values() for phase in phases))


def aggregation_seconds(record):
    return phase_seconds(record, AGGREGATION_PHASES)


# ----------------------------------------------------------------------------------------------
# Reading


def read_json(path, what):
    """Parsed JSON of a file, or None after one warning naming the file."""
    try:
        return files.read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        log.warning("skipping unreadable %s %s: %s", what, path, error)
        return None


def worker_meta(*, index, rank, job_id, num_workers, role, byzantine, mode, network, dataset, device, node,
                batch_size, num_params, param_bytes, slowdown, device_share, non_iid, train_samples, classes, config,
                clock=None):
    """The fields of a worker's META_FILE (RunLog adds the log format's version): who it is in its job (its position
    `worker_index`, the transport's `rank`, the job's id and size), what it trains (its share's samples and, on
    by-class data, classes), how its device is emulated (emulation()), the clock its times were read from (`clock`:
    a virtual clock's device and link model, else {"kind": "real"}) and the resolved command line (`config`)."""
    clock = clock or {"kind": REAL_CLOCK}
    return dict(worker_index=index, rank=rank, job_id=job_id, num_workers=num_workers, role=role, byzantine=byzantine,
                mode=mode, network=network, dataset=dataset, device=device, node=node, batch_size=batch_size,
                num_params=num_params, param_bytes=param_bytes, slowdown=slowdown, emulated_slowdown=slowdown > 1,
                emulation=emulation(slowdown, device_share, clock["kind"] == VIRTUAL_CLOCK), device_share=device_share,
                non_iid=non_iid, train_samples=train_samples, classes=classes, pid=os.getpid(), clock=clock,
                config=config)


CPU_QUOTA, SLEEPING = "cpu-quota", "sleeping"  # a device of fixed capacity; one whose steps are padded with sleep
REAL_CLOCK, VIRTUAL_CLOCK = "real", "virtual"   # the clock a run's times were read from (meta.json's clock.kind)


def emulation(slowdown, device_share, virtual=False):
    """How a worker's device is emulated: charged on a virtual clock, under a CPU quota, sleeping, or not (None)."""
    return VIRTUAL_CLOCK if virtual else CPU_QUOTA if device_share else SLEEPING if slowdown > 1 else None


def read_meta(folder):
    """meta.json of a device folder; {} when there is none (the original scripts wrote none)."""
    path = os.path.join(folder, META_FILE)
    if not os.path.exists(path):
        return {}
    meta = read_json(path, "meta file")
    if not isinstance(meta, dict):
        if meta is not None:
            log.warning("skipping meta file %s: not a JSON object", path)
        return {}
    return meta


def first_file_number(meta):
    """The file number of round 1: 0 in this project's logs before log_format 2, else 1."""
    return 0 if meta and "log_format" not in meta else 1


def read_round(path):
    """A usable round record; None (after a warning) when the file is unreadable or malformed."""
    record = read_json(path, "round log")
    if record is None:
        return None
    problem = round_problem(record)
    if problem:
        log.warning("skipping malformed round log %s: %s", path, problem)
        return None
    return record


class DeviceLog:
    """A device folder as read: `meta` ({} without meta.json) and `rounds` ({round from 1: record})."""

    def __init__(self, folder):
        self.folder = folder
        self.meta = read_meta(folder)
        offset = 1 - first_file_number(self.meta)
        self.rounds = {}
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            match = ROUND_FILE.match(name)
            if name in WORKER_FILES or name.startswith("."):
                continue
            if not match or not os.path.isfile(path):
                log.warning("skipping stray entry %s (not an iter-<N>.txt file)", path)
                continue
            record = read_round(path)
            if record is not None:
                self.rounds[int(match.group(1)) + offset] = record

    def ordered(self):
        return [self.rounds[n] for n in sorted(self.rounds)]


def subfolders(path):
    return sorted(name for name in os.listdir(path) if os.path.isdir(os.path.join(path, name)))


def device_folders(mode_dir):
    """[(node, device folder name, path)] of every <node>/<device> folder of a run (the launcher's folders beside the
    nodes left out)."""
    return [(node, device, os.path.join(mode_dir, node, device))
            for node in subfolders(mode_dir) if node not in (PROCESSES_FOLDER, CHECKPOINTS_FOLDER)
            for device in subfolders(os.path.join(mode_dir, node))]


def links_described(mode_dir):
    """The one-line description of the links a run had, as the launcher recorded it; None for a run it did not
    start."""
    return launcher_record(mode_dir, "links_described")


def median_step_seconds(records, phases, warmup=COMPUTE_WARMUP):
    """The median seconds of `phases` per local step over `records` (in step order) after the first `warmup` steps
    (all of them when there are no more); None without a step that logged one of the phases."""
    steps = [sum(step.get(phase, 0.0) for phase in phases) for record in records for step in record["time"].values()
             if any(phase in step for phase in phases)]
    steps = steps[warmup:] or steps
    return statistics.median(steps) if steps else None


def devices_described(mode_dir):
    """The one-line description of how a run's devices were emulated, as the launcher recorded it; None for a run it
    did not start or recorded before it said."""
    return launcher_record(mode_dir, "devices_described")


def launcher_record(mode_dir, key):
    path = os.path.join(mode_dir, PROCESSES_FOLDER, NETWORK_FILE)
    if not os.path.exists(path):
        return None
    record = read_json(path, "network record")
    return record.get(key) if isinstance(record, dict) else None


def has_rounds(mode_dir):
    return any(ROUND_FILE.match(name) for _, _, path in device_folders(mode_dir) for name in os.listdir(path))


class RunFollower:
    """Follows the training workers' logs of a run while it trains, reading each round once (the launcher's
    progress lines); Zeno's validator, which trains on held-out data, is left out."""

    def __init__(self, mode_dir):
        self.mode_dir = mode_dir
        self.next_round = {}       # device folder -> (the round to read next, the file number of round 1)
        self.rounds = 0            # the most rounds any worker logged
        self.samples = 0           # over all workers
        self.training_time = 0.0   # the longest total_time logged
        self.accuracy = None       # the evaluating worker's latest test accuracy

    @property
    def throughput(self):
        return self.samples / self.training_time if self.training_time > 0 else 0.0

    def update(self):
        for _, _, folder in device_folders(self.mode_dir):
            if not is_validator_folder(folder):
                self._read_new_rounds(folder)
        return self

    def _read_new_rounds(self, folder):
        if folder not in self.next_round:
            if not os.path.exists(os.path.join(folder, META_FILE)):
                return  # the worker has not started writing
            self.next_round[folder] = (1, first_file_number(read_meta(folder)))
        n, first = self.next_round[folder]
        while os.path.exists(round_path(folder, n - 1 + first)):
            record = read_round(round_path(folder, n - 1 + first))
            if record is not None:
                self._add(record)
            self.rounds = max(self.rounds, n)
            n += 1
        self.next_round[folder] = (n, first)

    def _add(self, record):
        self.samples += record["num_samples"]
        self.training_time = max(self.training_time, record["total_time"])
        if record.get("accuracy") is not None:  # one worker of a job evaluates
            self.accuracy = record["accuracy"]
