"""Per-device iteration logs in the original ESync format: <log_dir>/<node>/<device>-rank<R>/iter-<N>.txt.

Each file holds one JSON object for global iteration N: num_iters (local steps), time (per local step: the
seconds of each phase), num_samples (samples trained in this iteration), total_time (seconds since the worker
started; a resumed job continues from its checkpoint's time) and accuracy when this worker evaluated.
meta.json beside them describes the worker and the job.
"""
import glob
import logging
import os

from training.files import write_json

log = logging.getLogger(__name__)


class IterationLog:
    def __init__(self, log_dir, node, device_folder, meta, first_iteration=0):
        """Logs from `first_iteration` on replace an earlier run's; a resumed job keeps those before it."""
        self.folder = os.path.join(log_dir, node, device_folder)
        os.makedirs(self.folder, exist_ok=True)
        stale = [path for path in glob.glob(os.path.join(self.folder, "iter-*.txt"))
                 if _iteration_of(path) >= first_iteration]
        # Files an earlier run was writing when it was killed (training.files.atomic_write's hidden temporaries).
        stale += glob.glob(os.path.join(self.folder, ".*.tmp"))
        for path in stale:  # only this worker's own folder: an earlier run of the same worker slot
            os.unlink(path)
        if stale:
            log.info("removed %d iteration logs (or unfinished files) of an earlier run from %s", len(stale),
                     self.folder)
        write_json(os.path.join(self.folder, "meta.json"), meta)

    def write(self, iteration, step_times, num_samples, total_time, accuracy=None, **extra):
        record = {
            "num_iters": len(step_times),
            "time": {str(i): t for i, t in enumerate(step_times)},
            "num_samples": num_samples,
            "total_time": round(total_time, 6),
        }
        if accuracy is not None:
            record["accuracy"] = accuracy
        record.update(extra)
        write_json(os.path.join(self.folder, f"iter-{iteration}.txt"), record)

    def path(self, name):
        return os.path.join(self.folder, name)


def _iteration_of(path):
    name = os.path.basename(path)
    try:
        return int(name[len("iter-"):-len(".txt")])
    except ValueError:
        return -1  # not ours to remove
