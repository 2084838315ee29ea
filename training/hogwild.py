"""Hogwild! (Niu, Recht, Re, Wright 2011) on one machine: worker processes update one shared copy of the weights
without locks.

`python main.py -m hogwild --hogwild-workers N ...` is the coordinator: it builds the initial weights (the seed's),
puts them in one block of POSIX shared memory, starts N worker processes (main.py with the same flags and
--hogwild-rank R), waits for them, and removes the block whatever happens. Under the launcher each worker enters its
worker's CPU quota, whose group the coordinator hands it (launcher/with-groups: inside a network namespace the
workers could not open it); started by hand, each makes its own. A worker attaches to the block and runs
the training loop with the Hogwild scheme (training/schemes/hogwild.py). MXNet's own shared-memory arrays
(Context 'cpu_shared') are handed to another process as a file descriptor that only multiprocessing's pickling
carries, so independent processes share a named block instead.
"""
import logging
import os
import signal
import subprocess
import sys
import time
from multiprocessing import resource_tracker, shared_memory

from training.devices import cpu_quota, threads
from training.faults.failures import EXIT_FAILURE
from training.lazy import np

log = logging.getLogger("hogwild")

STOP_GRACE = 5.0  # seconds a worker gets to end after SIGTERM before SIGKILL


class SharedWeights:
    """One block holding a count of updates per worker (int64, each written by its worker alone) and then every
    trainable array (float32); a numpy view of each."""

    def __init__(self, memory, shapes, workers, owner):
        self.memory = memory
        self.owner = owner
        self.updates = np.ndarray((workers,), dtype=np.int64, buffer=memory.buf)
        sizes = [int(np.prod(shape)) for shape in shapes]
        flat = np.ndarray((sum(sizes),), dtype=np.float32, buffer=memory.buf, offset=self.updates.nbytes)
        offsets = np.cumsum([0] + sizes)
        self.views = [flat[start:end].reshape(shape) for start, end, shape in zip(offsets, offsets[1:], shapes)]

    @classmethod
    def create(cls, arrays, workers):
        size = workers * 8 + sum(int(a.size) for a in arrays) * 4
        memory = shared_memory.SharedMemory(name=f"esync-hogwild-{os.getpid()}", create=True, size=size)
        weights = cls(memory, [a.shape for a in arrays], workers, owner=True)
        weights.updates[:] = 0
        for view, array in zip(weights.views, arrays):
            view[...] = array
        return weights

    @classmethod
    def attach(cls, name, shapes, workers):
        memory = shared_memory.SharedMemory(name=name)
        # The coordinator owns the block: this process must not remove it when it exits.
        resource_tracker.unregister(memory._name, "shared_memory")
        return cls(memory, shapes, workers, owner=False)

    @property
    def name(self):
        return self.memory.name

    def close(self):
        self.views, self.updates = [], None
        self.memory.close()
        if self.owner:
            self.memory.unlink()


def apply_gradient(view, grad, lr, wd):
    """w -= lr (g + wd w), in place on the shared weights, without a lock: another worker may be writing the same
    numbers at the same time (Hogwild!'s premise: sparse or small conflicts do little harm)."""
    view -= lr * (grad + wd * view)


def run_coordinator(args, argv, data):
    """Start the workers on shared initial weights; the worst exit code of theirs."""
    import mxnet as mx

    from training.model import Model

    model = Model(args.network, [mx.cpu()], data.train_images.shape[1:], args.seed)
    weights = SharedWeights.create([p.data().asnumpy() for p in model.trainable], args.hogwild_workers)
    log.info("Hogwild!: %d workers on shared weights /dev/shm/%s (%d arrays)", args.hogwild_workers, weights.name,
             len(weights.views))
    workers = []
    try:
        env = dict(os.environ)
        env.setdefault(threads.VARIABLE, str(threads.share(args.hogwild_workers)))
        for rank in range(args.hogwild_workers):
            command = [sys.executable, os.path.abspath(sys.argv[0]), *argv, "--hogwild-rank", str(rank),
                       "--hogwild-memory", weights.name]
            rank_env, group_fds = cpu_quota.handed_group(rank, env)
            workers.append(subprocess.Popen(command, env=rank_env, pass_fds=group_fds))
        return wait_for(workers)
    except KeyboardInterrupt:
        return 130
    finally:
        stop(workers)
        weights.close()


def wait_for(workers):
    """Wait for every worker; when one fails, stop the others and return its code."""
    while True:
        codes = [w.poll() for w in workers]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            log.error("a Hogwild! worker exited with code %d: stopping the others", failed[0])
            return failed[0] if failed[0] > 0 else EXIT_FAILURE
        if all(code == 0 for code in codes):
            return 0
        try:
            workers[codes.index(None)].wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass


def stop(workers):
    running = [w for w in workers if w.poll() is None]
    for w in running:
        w.send_signal(signal.SIGTERM)
    deadline = time.time() + STOP_GRACE
    for w in running:
        try:
            w.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
