"""What every coordination rule answers unless it says otherwise: the ESync family's readiness (/apply/) and plan of
one of the slowest worker's steps (/plan/), and NBSSGD's rounds (/arrive/, /watch/). A rule is a Rule with a name;
its module overrides what it answers differently. Every method is a pure function of the job's records.

An ESync rule's module holds its worker side too, a Worker: what an ESync worker (training/schemes/esync.py) asks
the state server and when, what it does with the answer, and what it logs of it."""
import threading

from coordination import records

WATCH_SECONDS = 2.0  # one long-poll of /watch/; a worker asks again until the answer it waits for comes


class Worker:
    """The worker side of a rule in ESync's rounds. `esync` is the worker's scheme: its state client, rank, request
    thread (`requests`), smoothed step time, the request that opened the round (`opening`) and its start."""
    reports_aggregation = False  # the worker times its aggregations for the rule
    sized_by = ()                # the ESync options that size the rule's rounds (training/schemes/esync.py)
    in_flight = False            # its requests fly beside the steps, timed by the machine (not on a virtual clock)

    def __init__(self, esync):
        self.esync = esync

    def begin_round(self, completed):
        """A round starts after `completed` global iterations: send what opens it, if anything."""

    def round_done(self, steps, opened):
        """Whether the round ends after `steps` local steps; `opened`: the answer to the request that opened it,
        the first time it is asked (None after that)."""
        raise NotImplementedError

    def abandons_step(self):
        """Whether the step whose gradient was just computed is dropped (READY arrived while it ran)."""
        return False

    def record(self, record):
        """What the round's record logs of the rule, added to `record`."""


class LongPolling:
    """The worker side of a rule whose workers long-poll /watch/ (NBSSGD's rounds, the backup workers' steps): a
    client for their requests, one for the long-polls (another thread's), and the job's set-up, by rank 0 and again
    by the first worker to find a restarted state server without it. `give_up(reason)` ends the worker where a wait
    outlasts the sync timeout (from any thread); `settings`: what /init/ sends besides the workers."""

    def __init__(self, address, rank, num_workers, sync_timeout, give_up, **settings):
        self.rank, self.num_workers, self.sync_timeout, self.settings = rank, num_workers, sync_timeout, settings
        self.give_up = give_up
        # here, not at the top: every process of a job reads the rules' names, and the client's http.client and ssl
        # cost each of them 20 ms of CPU
        from coordination.client import StateClient

        self.client = StateClient(*address, retry_for=sync_timeout, on_not_initialised=self.set_up_job_again)
        self.watch_client = StateClient(*address, retry_for=sync_timeout, timeout=WATCH_SECONDS + 10,
                                        on_not_initialised=self.set_up_job_again)
        self.init_client = StateClient(*address, retry_for=sync_timeout)
        self.init_lock = threading.Lock()

    def set_up_job(self):
        self.init_client.init(self.num_workers, **self.settings)

    def set_up_job_again(self):
        with self.init_lock:  # both threads may find out at once
            self.init_client.init_again_if_lost(self.num_workers, **self.settings)

    def watches(self):
        """As many long-polls as fit in the sync timeout."""
        return range(max(1, int(self.sync_timeout / WATCH_SECONDS)))

    def close(self):
        for client in (self.client, self.watch_client, self.init_client):
            client.close()


class Rule:
    esync = False  # a policy of ESync's workers (--esync-policy): then `worker` is its worker side

    def __init__(self, name, esync=False, worker=None):
        self.name = name
        self.esync = esync
        self.worker = worker

    def check(self, num_workers, settings):
        """A FieldError naming the setting the rule cannot run with."""

    def described(self, settings):
        """What the rule adds of the job's settings to /init/'s answer and the state."""
        return {}

    def sizing(self, settings):
        """The rule's settings in the state server's log line of a new job (', ...' or '')."""
        return ""

    def ready(self, job, rank, now):
        """/apply/: whether worker `rank` should stop stepping and wait for the aggregation."""
        return records.is_ready(job.workers, rank, job.epsilon, now)

    def plan(self, job, rank):
        """/plan/: worker `rank`'s local steps this round, about one step of the slowest worker."""
        return {"k": records.planned_steps(job.workers, rank, job.epsilon)}

    def status(self, job, t):
        """/watch/: round t of NBSSGD, finished once anyone has arrived at it, gathered once everyone has (a
        resumed job: once anyone has, of the first round it hears of)."""
        if t < job.oldest_round:
            return {"finished": True, "gathered": True}
        arrived = job.rounds[t].arrived if t in job.rounds else set()
        everyone = len(arrived) == job.num_workers or (t == job.round_in_progress and bool(arrived))
        return {"finished": bool(arrived), "gathered": everyone}

    def arrive(self, job, rank, t):
        """/arrive/: worker `rank` is at a mini-batch boundary of round t; returns (whether the round changed,
        the answer)."""
        changed = t >= job.oldest_round
        if changed:
            job.round(t).arrived.add(rank)
        return changed, self.status(job, t)
