"""A coordination rule kept outside the project, named in ESYNC_RULE_MODULES (tests/test_esync.py): ESync's plan
rule's worker side, and a state-server side that plans the same local steps for every worker of every round."""
from coordination.rules.base import Rule
from coordination.rules.plan import Planning

NAME = "fixed-steps"
STEPS = 3


class FixedSteps(Rule):
    def plan(self, job, rank):
        return {"k": STEPS}


RULE = FixedSteps(NAME, esync=True, worker=Planning)
