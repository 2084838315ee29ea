"""ESync's plan rule: a worker asks once per round how many local steps fit in one step of the slowest worker
(records.planned_steps)."""
from coordination.rules.base import Rule

NAME = "plan"
RULE = Rule(NAME, esync=True)
