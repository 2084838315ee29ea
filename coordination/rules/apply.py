"""ESync's rule as the paper states it (Algorithm 2): a worker asks after every local step whether to stop, and the
state server answers READY when it is the slowest, when the slowest is ready, or when its next step would end after
the slowest worker's (records.is_ready)."""
from coordination.rules.base import Rule

NAME = "apply"
RULE = Rule(NAME, esync=True)
