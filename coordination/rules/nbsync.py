"""Non-blocking Synchronous SGD: a round ends when the first worker completes its whole batch; it and every other
worker "arrive" at their next mini-batch boundary, and once all have arrived, all aggregate. Workers learn of the
first arrival and of the last one by long-polling /watch/. A job set up again after a restart (resumed) cannot know
who arrived at the round in progress: a worker told "gathered" just before the restart is already in the aggregation
and never asks again, so the first round such a job hears of counts as gathered once anyone has arrived (the
aggregation itself still waits for every worker). The rule is the default rounds of rules/base.py."""
from coordination.rules.base import Rule

NAME = "nbsync"
RULE = Rule(NAME)
