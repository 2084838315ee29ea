"""The state server's rules on a virtual clock: every worker's requests answered in-process by one Coordinator (the
state server's own, coordination/state.py) at the asking worker's virtual time, each charged a
declared round trip; what a worker sends while its step runs is sent at once (an executor with no thread: the
scheduler runs one worker at a time)."""
import concurrent.futures

from coordination.records import Settings
from coordination.state import Coordinator


class VirtualCoordination:
    """One job's state server: the Coordinator, on the clock of whichever worker asks."""

    def __init__(self, scheduler, round_trip=0.0):
        self.scheduler, self.round_trip = scheduler, round_trip
        self.asking = 0
        self.coordinator = Coordinator(clock=lambda: self.scheduler.now(self.asking))
        self.executor = AtOnce()

    def client(self, rank, on_not_initialised=None):
        return VirtualStateClient(self, rank)  # an in-process state server never restarts

    def arrivals(self, rank, num_workers, policy):
        return VirtualArrivals(self, rank, num_workers, policy)

    def ask(self, rank, method, *args):
        self.asking = rank
        answer = getattr(self.coordinator, method)(*args)
        if self.round_trip:
            self.scheduler.advance(rank, self.round_trip)
        return answer


class VirtualStateClient:
    """StateClient's calls (coordination/client.py) that ESync's rules make, answered in-process."""

    def __init__(self, coordination, rank):
        self.coordination, self.rank = coordination, rank

    def init(self, num_workers, epsilon=None, policy="apply", resumed=False, share=None, max_slowest_steps=None,
             overlap=None, accept=None):
        defaults = Settings()
        settings = Settings(share=defaults.share if share is None else share,
                            max_slowest_steps=max_slowest_steps or defaults.max_slowest_steps, overlap=bool(overlap),
                            accept=accept)
        return self.coordination.ask(self.rank, "init", num_workers, epsilon, policy, resumed, settings)

    def init_again_if_lost(self, *args, **kwargs):
        return False  # an in-process state server never restarts

    def apply(self, rank, k, c, te, retry_for=None):
        return bool(self.coordination.ask(rank, "apply", rank, k, c, te))

    def reset(self, rank, t, te):
        self.coordination.ask(rank, "reset", rank, t, te)

    def plan(self, rank, c):
        return int(self.plan_round(rank, c)["k"])

    def plan_round(self, rank, c, a=None):
        return self.coordination.ask(rank, "plan", rank, c, a)

    def close(self):
        pass


class VirtualArrivals:
    """NBSSGD's worker side (coordination/rules/nbsync.py Arrivals) on a virtual clock: where the real one learns of
    a round's first arrival and of its last by long polls, this one asks the round's status after each part, at
    the part's virtual time, which is when a long poll's answer would be read."""

    def __init__(self, coordination, rank, num_workers, policy):
        self.coordination, self.rank, self.num_workers, self.policy = coordination, rank, num_workers, policy
        self.t = self.arrived = self.gathered = None

    def set_up_job(self):
        self.coordination.ask(self.rank, "init", self.num_workers, None, self.policy)

    def begin_round(self, t):
        self.t, self.arrived, self.gathered = t, False, False

    def part_done(self, completed_batch):
        ask = self.coordination.ask
        if not self.arrived:
            if not (completed_batch or ask(self.rank, "watch", self.rank, self.t, False, 0)["finished"]):
                return False
            self.arrived = True
            self.gathered = ask(self.rank, "arrive", self.rank, self.t)["gathered"]
        if not self.gathered:
            self.gathered = ask(self.rank, "watch", self.rank, self.t, True, 0)["gathered"]
        return self.gathered

    def close(self):
        pass


class AtOnce(concurrent.futures.Executor):
    """Runs what is submitted at once, on the caller's thread."""

    def submit(self, fn, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to whoever asks the future
            future.set_exception(error)
        return future
