"""ESync's plan rule: a worker asks once per round, while the round's first step runs, how many local steps fit in
one step of the slowest worker (records.planned_steps), and logs the count it was given."""
from coordination import records
from coordination.rules.base import Rule, Worker

NAME = "plan"


class Planning(Worker):
    def __init__(self, esync):
        super().__init__(esync)
        self.plan = {"k": 1}  # the state server's plan of this round (before the first: one step)
        self.unplanned = False  # a round opened with no step time to plan by (the first): sends it at its end

    def begin_round(self, completed):
        esync = self.esync
        self.unplanned = esync.step_seconds is None
        if not self.unplanned:
            aggregation = esync.aggregation_seconds if self.reports_aggregation else None
            esync.opening = esync.requests.submit(esync.client.plan_round, esync.rank, esync.step_seconds,
                                                  aggregation)

    def round_done(self, steps, opened):
        if opened is not None:
            self.plan = opened
        done = self.ends(steps)
        if done and self.unplanned:
            self.report_step()
        return done

    def ends(self, steps):
        return steps >= self.plan["k"]

    def report_step(self):
        """The first round's step time, sent before its aggregation (the answer, one step, unused): the second
        round's plans then know every worker's. Sent with the second round's request instead, it would reach the
        state server after the plans of the workers that ask before it, each planned as a first round."""
        esync = self.esync
        esync.requests.submit(esync.client.plan_round, esync.rank, esync.step_seconds).result()
        self.unplanned = False

    def record(self, record):
        record[records.PLANNED_STEPS] = self.plan["k"]


RULE = Rule(NAME, esync=True, worker=Planning)
