"""Checkpoints of the global model in a shared folder (--train-dir), for a separate evaluator and for --resume.

Rank 0 writes, every --save-freq global steps and once more when training ends:
  <train-dir>/ckpt-<S>.params   the weights after S global steps (MXNet's save_parameters format)
  <train-dir>/ckpt-<S>.states   rank 0's local optimizer state (momentum; Adam's moments and step counts), for
                                modes with a local optimizer
  <train-dir>/ckpt-<S>.json     step, time, mode, network, dataset, the size and CRC-32 of each file above
                                ("files"): written last, so a checkpoint exists exactly when its .json does
  <train-dir>/final.json        the marker written after the last checkpoint: {"step": S}
Every file is written atomically (training/files.atomic_write): a process killed at any moment leaves whole
checkpoints only. Checkpoints are kept, or with --keep-checkpoints K the newest K: an older one is deleted, its
.json first, once a newer one is whole. A file damaged later (a cut copy, a full disk, a bad
sector) no longer matches its checksum: --resume and the evaluator skip that checkpoint with a warning.

Resuming restores the global step, the training time, the weights, the local optimizer state (the same state
for every worker: exact for sync, rank 0's for every ESync worker; a run whose local optimizer differs from the
checkpoint's starts its optimizer afresh) and rank 0's count of passes over its shard. Not restored: the servers' optimizer state in async / DC-ASGD modes (momentum, DC-ASGD's backup
weights), the position in each worker's data order, the ESync state server's step times, and the work done
after the last checkpoint.
"""
import glob
import json
import logging
import os
import re
import zlib
from dataclasses import dataclass

from training.files import atomic_write, write_json

log = logging.getLogger(__name__)

CHECKPOINT_JSON = re.compile(r"^ckpt-(\d+)\.json$")
FINAL_MARKER = "final.json"
CHECKSUM_CHUNK = 1 << 22


class CheckpointError(Exception):
    """A checkpoint folder that cannot be resumed from; the message says why."""


@dataclass
class ResumePoint:
    """Where training starts: step 0 of a new job, or a checkpoint's step, time and files."""
    step: int = 0
    elapsed: float = 0.0
    epochs: float = 0.0
    params: str = None
    states: str = None


def checkpoint_path(train_dir, step, suffix):
    return os.path.join(train_dir, f"ckpt-{step}.{suffix}")


def saved_steps(train_dir):
    """Steps of the complete checkpoints in train_dir, ascending."""
    if not os.path.isdir(train_dir):
        return []
    steps = (CHECKPOINT_JSON.match(name) for name in os.listdir(train_dir))
    return sorted(int(match.group(1)) for match in steps if match)


def read_checkpoint(train_dir, step):
    with open(checkpoint_path(train_dir, step, "json")) as f:
        return json.load(f)


def final_step(train_dir):
    """The last step of a finished job (its final marker), or None while training goes on."""
    try:
        with open(os.path.join(train_dir, FINAL_MARKER)) as f:
            return int(json.load(f)["step"])
    except FileNotFoundError:
        return None


def file_checksum(path):
    """Size and CRC-32 of a file: what a checkpoint's .json records of each of its files. CRC-32 finds the
    accidental damage meant here (a cut copy, a full disk, a bad sector) at a tenth of SHA-256's cost, which rank 0
    pays while the other workers wait."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHECKSUM_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return {"bytes": os.path.getsize(path), "crc32": f"{crc:08x}"}


def damage(train_dir, step):
    """Why the checkpoint at `step` cannot be trusted, or None when every file matches its recorded checksum.
    Checkpoints written before checksums were recorded are checked for their parameter file only."""
    try:
        meta = read_checkpoint(train_dir, step)
        files = meta.get("files") or {meta.get("params") or f"ckpt-{step}.params": None}
    except (OSError, ValueError, AttributeError) as err:
        return f"ckpt-{step}.json unreadable ({err})"
    for name, expected in files.items():
        path = os.path.join(train_dir, name)
        if not os.path.isfile(path):
            return f"{name} is missing"
        if expected is None:
            continue
        found = file_checksum(path)
        if found["bytes"] != expected.get("bytes"):
            return f"{name} holds {found['bytes']} bytes, not the {expected.get('bytes')} saved"
        if found["crc32"] != expected.get("crc32"):
            return f"{name} does not match its checksum"
    return None


def latest_intact_step(train_dir):
    """The step of the newest checkpoint whose files are intact; each damaged one newer than it is named in a
    warning. A CheckpointError when there is none."""
    steps = saved_steps(train_dir)
    if not steps:
        raise CheckpointError(f"--resume: no checkpoint in {train_dir} (no ckpt-<step>.json)")
    for step in reversed(steps):
        problem = damage(train_dir, step)
        if problem is None:
            return step
        log.warning("checkpoint at step %d in %s is damaged (%s): skipped", step, train_dir, problem)
    raise CheckpointError(f"--resume: every checkpoint in {train_dir} is damaged (steps {compact(steps)})")


def compact(steps):
    return ", ".join(map(str, steps)) if len(steps) <= 4 else f"{steps[0]}, {steps[1]}, ..., {steps[-1]}"


def check_train_dir(args):
    """Before any network wait: where training starts. --resume needs an intact checkpoint of this network and
    dataset (the newest one; damaged ones are skipped with a warning); a new job needs a folder without
    checkpoints."""
    if (args.resume or args.resume_if_saved) and not args.train_dir:
        raise CheckpointError("--resume needs --train-dir (the folder the checkpoints were saved to)")
    if not args.train_dir:
        return ResumePoint()
    steps = saved_steps(args.train_dir)
    args.resume = args.resume or (args.resume_if_saved and bool(steps))
    if not args.resume:
        if steps:
            raise CheckpointError(f"{args.train_dir} holds checkpoints of an earlier job (up to step {steps[-1]}): "
                                  "add --resume to continue it, or choose another --train-dir")
        return ResumePoint()
    step = latest_intact_step(args.train_dir)
    meta = read_checkpoint(args.train_dir, step)
    for key in ("network", "dataset"):
        if meta.get(key) != getattr(args, key):
            raise CheckpointError(f"--resume: the checkpoint at step {step} in {args.train_dir} is of "
                                  f"{key} {meta.get(key)}, not {getattr(args, key)}")
    states = checkpoint_path(args.train_dir, step, "states")
    return ResumePoint(step, float(meta["time"]), float(meta.get("epochs", 0.0)),
                       checkpoint_path(args.train_dir, step, "params"), states if os.path.exists(states) else None)


def load_weights(resume, model):
    """Rank 0, before the initial broadcast: the checkpoint's weights become every worker's."""
    model.load(resume.params)
    log.info("resuming at global step %d from %s", resume.step, resume.params)


def load_optimizer_state(resume, scheme):
    """Every worker, after the scheme's setup: the checkpoint's local optimizer state, when both exist."""
    if resume.states is None or not scheme.has_local_optimizer:
        return
    with open(resume.states, "rb") as f:
        scheme.load_local_optimizer_states(f.read())


class CheckpointWriter:
    """Rank 0's side: every `save_freq` global steps and at the end, one checkpoint; then the final marker."""

    def __init__(self, train_dir, save_freq, description, keep=None):
        self.train_dir = train_dir
        self.save_freq = save_freq
        self.description = description
        self.keep = keep  # the newest checkpoints kept; None: all
        self.last_saved = None
        os.makedirs(train_dir, exist_ok=True)
        self._clean_earlier_leftovers()

    def _clean_earlier_leftovers(self):
        """A final marker of a job now resumed, and temporary files of a process killed while writing."""
        for path in [os.path.join(self.train_dir, FINAL_MARKER)] + glob.glob(os.path.join(self.train_dir, ".*.tmp")):
            if os.path.exists(path):
                os.unlink(path)

    def due(self, step):
        return bool(self.save_freq) and step % self.save_freq == 0

    def save(self, step, elapsed, epochs, model, optimizer_states=None):
        """The weights, and the local optimizer's state when the scheme has one (Scheme.local_optimizer_states)."""
        files = [("params", model.save)]
        if optimizer_states is not None:
            def write_states(path):
                with open(path, "wb") as f:
                    f.write(optimizer_states)
            files.append(("states", write_states))
        write_checkpoint(self.train_dir, step, elapsed, epochs, self.description, files)
        self.last_saved = step
        if self.keep:
            for older in saved_steps(self.train_dir)[:-self.keep]:
                delete_checkpoint(self.train_dir, older)

    def finish(self, step, elapsed, epochs, model, optimizer_states=None):
        """The last checkpoint (unless this step was just saved), then the marker an evaluator stops at."""
        if self.last_saved != step:
            self.save(step, elapsed, epochs, model, optimizer_states)
        write_final_marker(self.train_dir, step, elapsed)
        log.info("last checkpoint: step %d in %s", step, self.train_dir)


def write_checkpoint(train_dir, step, elapsed, epochs, description, files):
    """One checkpoint: each of `files`, [(suffix, write(path))], written atomically, then the .json that names them
    with their checksums (so that the checkpoint exists once all of them do)."""
    written = []
    for suffix, write in files:
        written.append(checkpoint_path(train_dir, step, suffix))
        atomic_write(written[-1], write)
    record = {"step": step, "time": round(elapsed, 6), "epochs": epochs, **description,
              "params": os.path.basename(written[0]),
              "files": {os.path.basename(path): file_checksum(path) for path in written}}
    write_json(checkpoint_path(train_dir, step, "json"), record)


def delete_checkpoint(train_dir, step):
    """The .json first: from then on the checkpoint no longer exists, whatever is left of its other files."""
    for path in [checkpoint_path(train_dir, step, "json")] + glob.glob(checkpoint_path(train_dir, step, "*")):
        if os.path.exists(path):
            os.unlink(path)


def write_final_marker(train_dir, step, elapsed):
    write_json(os.path.join(train_dir, FINAL_MARKER), {"step": step, "time": round(elapsed, 6)})
