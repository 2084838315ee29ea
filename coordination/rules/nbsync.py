"""Non-blocking Synchronous SGD: a round ends when the first worker completes its whole batch; it and every other
worker "arrive" at their next mini-batch boundary, and once all have arrived, all aggregate. Workers learn of the
first arrival and of the last one by long-polling /watch/. A job set up again after a restart (resumed) cannot know
who arrived at the round in progress: a worker told "gathered" just before the restart is already in the aggregation
and never asks again, so the first round such a job hears of counts as gathered once anyone has arrived (the
aggregation itself still waits for every worker). The state server's side is the default rounds of rules/base.py;
the worker's side, Arrivals, is what NBSSGD's scheme (training/schemes/nbsync.py) asks between its parts."""
import concurrent.futures
import threading

from coordination.rules.base import WATCH_SECONDS, LongPolling, Rule

NAME = "nbsync"
RULE = Rule(NAME)


class RoundWatch:
    """What this worker knows about one round, filled in by the watcher thread."""

    def __init__(self, t):
        self.t = t
        self.finished = threading.Event()   # some worker completed its batch
        self.arrived = threading.Event()    # this worker arrived (set by the training thread)
        self.gathered = threading.Event()   # every worker arrived


class Arrivals(LongPolling):
    """A worker's side: a background long-poll per round (so checking its answers between parts is free), and the
    worker's arrival at a part boundary. After a restart of the state server, the watchers of workers that had
    arrived repeat their arrival, and the job set up again counts the round in progress as gathered once anyone has
    arrived (above)."""

    def __init__(self, address, rank, num_workers, sync_timeout, give_up):
        super().__init__(address, rank, num_workers, sync_timeout, give_up, policy=NAME)
        self.watcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nbsync-watch")
        self.round = self.watching = None

    def begin_round(self, t):
        self.round = RoundWatch(t)
        self.watching = self.watcher.submit(self._watch, self.round)

    def part_done(self, completed_batch):
        """After a part: whether every worker has arrived and the round aggregates. This worker arrives once it has
        completed its batch or some worker has."""
        if self.watching.done() and self.watching.exception():
            raise self.watching.exception()
        watch = self.round
        if not watch.arrived.is_set():
            if not (completed_batch or watch.finished.is_set()):
                return False
            status = self.client.arrive(self.rank, watch.t)
            watch.arrived.set()
            if status["gathered"]:
                watch.gathered.set()
        return watch.gathered.is_set()

    def _watch(self, watch):
        """Long-polls the state server until round `watch.t` has gathered everyone. The training thread may learn
        first (from its own /arrive/): then this watch ends, and a request being retried is dropped rather than
        telling a restarted server about a round that is over."""
        over = watch.gathered.is_set

        def wanted():
            return not over()

        # Until this worker arrives, the round's end; once it has, its arrival goes with every request, so a
        # restarted server that lost it learns it again.
        while not (watch.finished.is_set() or watch.arrived.is_set() or over()):
            status = self.watch_client.watch(self.rank, watch.t, False, WATCH_SECONDS, still_wanted=wanted)
            if status is not None and status["finished"]:
                watch.finished.set()
        # The training thread arrives at its next part boundary. It keeps computing parts while it waits, so the
        # loop's watchdog would never fire: this thread bounds the wait.
        if not watch.arrived.wait(self.sync_timeout):
            self.give_up(f"round {watch.t} finished but no local step ended within {self.sync_timeout:g} s")
        for _ in self.watches():
            if over():
                return
            status = self.watch_client.watch(self.rank, watch.t, True, WATCH_SECONDS, still_wanted=wanted)
            if status is not None and status["gathered"]:
                watch.gathered.set()
                return
        self.give_up(f"not every worker arrived for the aggregation of round {watch.t} within "
                f"{self.sync_timeout:g} s: another worker of the job has probably died")

    def close(self):
        self.watcher.shutdown(wait=False, cancel_futures=True)
        super().close()
