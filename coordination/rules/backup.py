"""SSGD with backup workers: a step closes once its first `accept` gradients have arrived (/arrive/ answers whether
this one was among them); a worker that arrives later is told it is late, and its gradient is dropped. Workers
learn that a step closed, and whose gradients it holds, by long-polling /watch/. The worker's side, Steps, is what
the scheme (training/schemes/backup.py) asks."""
from coordination.records import FieldError
from coordination.rules.base import WATCH_SECONDS, LongPolling, Rule

NAME = "backup"


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


class Steps(LongPolling):
    """A worker's side: whether a gradient is among its step's first `accept` (the training thread), and whose
    gradients a step holds once it has closed (the aggregator thread, on the long-polling client)."""

    def __init__(self, address, rank, num_workers, accept, sync_timeout, give_up):
        super().__init__(address, rank, num_workers, sync_timeout, give_up, policy=NAME, accept=accept)

    def accepted(self, t):
        """This worker's gradient for step t is ready: whether the step takes it."""
        return self.client.arrive(self.rank, t)["accepted"]

    def closed(self, step):
        """The ranks whose gradients step `step` applies, once it has closed."""
        for _ in self.watches():
            status = self.watch_client.watch(self.rank, step, False, WATCH_SECONDS)
            if status["finished"]:
                return status["arrived"]
        self.give_up(f"step {step} did not close within {self.sync_timeout:g} s: another worker of the job has "
                "probably died")
