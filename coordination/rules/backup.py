"""SSGD with backup workers: a step closes once its first `accept` gradients have arrived (/arrive/ answers whether
this one was among them); a worker that arrives later is told it is late, and its gradient is dropped. Workers
learn that a step closed, and whose gradients it holds, by long-polling /watch/. The worker's side, Steps, is what
the scheme (training/schemes/backup.py) asks."""
import threading

from coordination.records import FieldError
from coordination.rules.base import Rule
from training.faults.watchdog import give_up
from training.transport.state_client import StateClient

NAME = "backup"
WATCH_SECONDS = 2.0  # one long-poll; the aggregator asks again until the step closes


class Backup(Rule):
    def check(self, num_workers, settings):
        if not (settings.accept is not None and 1 <= settings.accept <= num_workers):
            raise FieldError("accept", f"must be between 1 and num_workers ({num_workers}) with policy backup")

    def described(self, settings):
        return {"accept": settings.accept}

    def sizing(self, settings):
        return f", each step applying the first {settings.accept} gradients"

    def status(self, job, t):
        """Step t closed ("finished" and "gathered" alike) once `accept` gradients have arrived; "arrived": whose,
        sorted. A step older than the ones kept closed long ago: nobody late waits for it."""
        if t < job.oldest_round:
            return {"finished": True, "gathered": True, "arrived": []}
        arrived = job.rounds[t].arrived if t in job.rounds else set()
        closed = len(arrived) >= job.settings.accept
        return {"finished": closed, "gathered": closed, "arrived": sorted(arrived)}

    def arrive(self, job, rank, t):
        """The gradient of `rank` for step t is ready: taken while the step is open; "accepted" says whether it was."""
        changed = t >= job.oldest_round and not self.status(job, t)["finished"]
        if changed:
            job.round(t).arrived.add(rank)
        status = self.status(job, t)
        return changed, {**status, "accepted": rank in status["arrived"]}


RULE = Backup(NAME)


class Steps:
    """A worker's side: the job set up on the state server (rank 0), whether a gradient is among its step's first
    `accept` (the training thread), and whose gradients a step holds once it has closed (the aggregator thread,
    long-polling on a client of its own)."""

    def __init__(self, address, rank, num_workers, accept, sync_timeout):
        self.rank, self.num_workers, self.accept, self.sync_timeout = rank, num_workers, accept, sync_timeout
        self.client = StateClient(*address, retry_for=sync_timeout, on_not_initialised=self.set_up_job_again)
        self.watch_client = StateClient(*address, retry_for=sync_timeout, timeout=WATCH_SECONDS + 10,
                                        on_not_initialised=self.set_up_job_again)
        self.init_lock = threading.Lock()

    def set_up_job(self):
        self.client.init(self.num_workers, policy=NAME, accept=self.accept)

    def set_up_job_again(self):
        with self.init_lock:  # the training thread and the aggregator may both find out
            self.client.init_again_if_lost(self.num_workers, policy=NAME, accept=self.accept)

    def accepted(self, t):
        """This worker's gradient for step t is ready: whether the step takes it."""
        return self.client.arrive(self.rank, t)["accepted"]

    def closed(self, step):
        """The ranks whose gradients step `step` applies, once it has closed."""
        for _ in range(max(1, int(self.sync_timeout / WATCH_SECONDS))):
            status = self.watch_client.watch(self.rank, step, False, WATCH_SECONDS)
            if status["finished"]:
                return status["arrived"]
        give_up(f"step {step} did not close within {self.sync_timeout:g} s: another worker of the job has "
                "probably died")

    def close(self):
        for client in (self.client, self.watch_client):
            client.close()
