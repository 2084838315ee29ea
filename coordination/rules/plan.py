"""ESync's plan rule: a worker asks once per round, while the round's first step runs, how many local steps fit in
one step of the slowest worker (records.planned_steps), and logs the count it was given."""
from coordination.rules.base import Rule, Worker
from training import runlog

NAME = "plan"


class Planning(Worker):
    def __init__(self, esync):
        super().__init__(esync)
        self.plan = {"k": 1}  # the state server's plan of this round (before the first: one step)

    def begin_round(self, completed):
        esync = self.esync
        if esync.step_seconds is not None:
            aggregation = esync.aggregation_seconds if self.reports_aggregation else None
            esync.opening = esync.requests.submit(esync.client.plan_round, esync.rank, esync.step_seconds,
                                                  aggregation)

    def round_done(self, steps, opened):
        if opened is not None:
            self.plan = opened
        return steps >= self.plan["k"]

    def record(self, record):
        record[runlog.PLANNED_STEPS] = self.plan["k"]


RULE = Rule(NAME, esync=True, worker=Planning)
