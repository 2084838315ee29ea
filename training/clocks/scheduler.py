"""The workers of a virtual job, run one at a time in the order of their virtual times.

Each worker runs in a thread of its own and holds the baton while it runs; it gives it up when its time moves on
(advance: a step charged) or when it joins a collective operation (meet), and the baton goes to the waiting worker
with the earliest time, ties to the lowest rank. A collective completes when every worker has joined it: each
worker's time becomes the finish the operation's model gives it, never before it joined. Since the worker that runs
is always the earliest, a worker never sees another's later state, and a run is the same whatever the machine does.
"""
import heapq
import threading


class VirtualJobFailed(RuntimeError):
    """A worker of the virtual job failed, or the workers wait on one another forever; the message says which."""


class Meeting:
    """One collective operation the workers gather for: what each brought, and when."""

    def __init__(self):
        self.contributions, self.arrivals, self.result = {}, {}, None


class Scheduler:
    def __init__(self, num_workers):
        self.num_workers = num_workers
        self.lock = threading.Condition()
        self.times = [0.0] * num_workers
        self.waiting = []        # (time, rank) of the workers ready to run, earliest first
        self.holder = None       # the rank that runs now
        self.meeting = None
        self.finished = set()
        self.failure = None
        self.events = 0          # advances and meetings: how far the invariants were checked

    def run(self, bodies):
        """Run bodies[rank]() for every rank, one at a time by virtual time; raise the first failure."""
        threads = [threading.Thread(target=self._worker, args=(rank, body), name=f"virtual-worker-{rank}",
                                    daemon=True) for rank, body in enumerate(bodies)]
        with self.lock:
            self.waiting = [(0.0, rank) for rank in range(self.num_workers)]
            heapq.heapify(self.waiting)
            self._pass()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.failure is not None:
            raise self.failure

    def _worker(self, rank, body):
        try:
            with self.lock:
                self._wait_for_baton(rank)
            body()
        except BaseException as error:  # the job fails with its first failure; the others stop at their next turn
            with self.lock:
                if self.failure is None:
                    self.failure = error
                self.lock.notify_all()
        finally:
            with self.lock:
                self.finished.add(rank)
                if self.holder == rank:
                    self._pass()

    def now(self, rank):
        return self.times[rank]

    def advance(self, rank, seconds):
        """Worker `rank`'s time moves on by `seconds`; it runs again once it is the earliest."""
        if not seconds >= 0:
            raise VirtualJobFailed(f"worker {rank} was charged {seconds} s: a charge is never negative")
        with self.lock:
            self._check_holder(rank)
            self.times[rank] += seconds
            heapq.heappush(self.waiting, (self.times[rank], rank))
            self.events += 1
            self._pass()
            self._wait_for_baton(rank)

    def meet(self, rank, contribution, complete):
        """Join the collective operation every worker takes part in next; once all have joined,
        complete({rank: contribution}, {rank: arrival}) gives (result, {rank: finish}), and each worker goes on at
        its finish. Returns the result."""
        with self.lock:
            self._check_holder(rank)
            meeting = self.meeting = self.meeting or Meeting()
            meeting.contributions[rank] = contribution
            meeting.arrivals[rank] = self.times[rank]
            if len(meeting.contributions) == self.num_workers:
                meeting.result, finishes = complete(meeting.contributions, meeting.arrivals)
                for other, finish in finishes.items():
                    if finish < meeting.arrivals[other]:
                        raise VirtualJobFailed(f"a collective finished for worker {other} at {finish} s, before it "
                                               f"joined at {meeting.arrivals[other]} s")
                    self.times[other] = finish
                    heapq.heappush(self.waiting, (finish, other))
                self.meeting = None
                self.events += 1
            self._pass()
            self._wait_for_baton(rank)
            return meeting.result

    def _check_holder(self, rank):
        if self.holder != rank:
            raise VirtualJobFailed(f"worker {rank} ran without the baton (worker {self.holder} holds it)")

    def _pass(self):
        """The baton to the earliest waiting worker; a failure where every worker left waits on a meeting."""
        if self.waiting:
            _, self.holder = heapq.heappop(self.waiting)
        else:
            self.holder = None
            stuck = self.num_workers - len(self.finished)
            if stuck and self.failure is None:
                self.failure = VirtualJobFailed(f"{stuck} worker(s) wait on a collective operation that the others "
                                                "left: they would wait forever")
        self.lock.notify_all()

    def _wait_for_baton(self, rank):
        self.lock.wait_for(lambda: self.holder == rank or self.failure is not None)
        if self.failure is not None:
            raise VirtualJobFailed(f"worker {rank} stopped: another worker failed ({self.failure})")
