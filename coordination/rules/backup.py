"""SSGD with backup workers: a step closes once its first `accept` gradients have arrived (/arrive/ answers whether
this one was among them); a worker that arrives later is told it is late, and its gradient is dropped. Workers
learn that a step closed, and whose gradients it holds, by long-polling /watch/."""
from coordination.records import FieldError
from coordination.rules.base import Rule

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
