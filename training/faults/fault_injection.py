"""Faults injected on purpose, to test that every failure path ends the whole job (tests/test_failure_matrix.py).

ESYNC_INJECT_FAULT=<role>:<phase>:<kind>[:after=N][:rank=R] in a process's environment makes that process, when
it has the role, fail the N-th time (default 1) it passes the named point, with `raise` (an exception), `kill`
(SIGKILL to itself) or `stop` (SIGSTOP to itself: alive but silent, as a hung host); with rank=R only the worker of
that rank does. Unset, every point is a single
comparison with None.

Points: worker start (checked, before joining), setup (joined, before the initial weights), training (each round's
local steps), aggregation (each round's), checkpoint (each save), leaving (after the last round); server and
scheduler start (before joining), training (a server applying a push), leaving (after the node's loop).
"""
import logging
import os
import signal

log = logging.getLogger("fault-injection")

ENV = "ESYNC_INJECT_FAULT"
ROLES = ("worker", "server", "scheduler")
PHASES = ("start", "setup", "training", "aggregation", "checkpoint", "leaving")
KINDS = ("raise", "kill", "stop")


class InjectedFault(RuntimeError):
    pass


class FaultPlan:
    def __init__(self, role, phase, kind, after=1, rank=None):
        if role not in ROLES or phase not in PHASES or kind not in KINDS or after < 1:
            raise ValueError(f"{role}:{phase}:{kind}:after={after}")
        self.role, self.phase, self.kind, self.after, self.rank = role, phase, kind, after, rank
        self.passed = 0

    @classmethod
    def parse(cls, text):
        try:
            role, phase, kind, *options = text.split(":")
            settings = dict(option.split("=", 1) for option in options)
            if set(settings) - {"after", "rank"}:
                raise ValueError
            rank = settings.get("rank")
            return cls(role, phase, kind, int(settings.get("after", 1)), None if rank is None else int(rank))
        except ValueError:
            raise ValueError(f"{ENV}={text!r}: expected <role>:<phase>:<{'|'.join(KINDS)}>[:after=N][:rank=R], a role of "
                             f"{', '.join(ROLES)}, a phase of {', '.join(PHASES)}") from None

    def reached(self, role, phase, rank):
        if (role, phase) != (self.role, self.phase) or (self.rank is not None and rank != self.rank):
            return
        self.passed += 1
        if self.passed != self.after:
            return
        log.warning("injecting a fault (%s): %s %s at %s", ENV, self.kind, role, phase)
        if self.kind in ("kill", "stop"):
            os.kill(os.getpid(), signal.SIGKILL if self.kind == "kill" else signal.SIGSTOP)
            return  # a stopped process that is continued goes on
        raise InjectedFault(f"fault injected at {role} {phase}")


_plan = None


def configure(environ=os.environ):
    """Read the plan from the environment; a malformed one is a ValueError with the expected form."""
    global _plan
    text = environ.get(ENV)
    _plan = FaultPlan.parse(text) if text else None
    return _plan


def planned():
    return _plan is not None


def point(role, phase, rank=None):
    if _plan is not None:
        _plan.reached(role, phase, rank)
