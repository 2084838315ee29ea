"""The state server's wire protocol: every endpoint, its method and its fields, declared once. The workers' client
(coordination/client.py) builds its requests from these declarations; the server's views
(SimpleStateServer/coordinator/views.py) read and check every request against them, and its URLs are their paths.

A request's fields travel as a form body (or a JSON object); a switch travels as 0 or 1. Every number has a range
a real job can need (`minimum`, `maximum`), checked by the server, which answers a missing, malformed or
out-of-range field with 400 naming it and changes nothing.
"""
from dataclasses import dataclass
from typing import Optional

from coordination.records import MAX_PLANNED_STEPS, MAX_WORKERS

JOB_ENV = "ESYNC_JOB_ID"  # the job every client of the process is of, where none is given (main.py's --job-id)


# What a client of the protocol meets; here rather than in client.py, whose http.client and ssl (20 ms of CPU) the
# processes that only name the rules never load.
class StateServerError(RuntimeError):
    """The server rejected a request (4xx) or answered something that is not JSON."""

    def __init__(self, status, message, url):
        super().__init__(f"{url} answered {status}: {message}")
        self.status = status
        self.message = message


class StateServerUnavailable(RuntimeError):
    """The server could not be reached (or kept failing) for the whole retry period."""


INTEGER, NUMBER, TEXT, SWITCH = "integer", "number", "text", "switch"


@dataclass(frozen=True)
class Field:
    name: str
    kind: str                          # INTEGER, NUMBER, TEXT or SWITCH
    meaning: str
    required: bool = True
    minimum: Optional[float] = None    # INTEGER and NUMBER
    maximum: Optional[float] = None


@dataclass(frozen=True)
class Endpoint:
    path: str
    method: str
    fields: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})
        object.__setattr__(self, "required", frozenset(f.name for f in self.fields if f.required))


MAX_STEPS = MAX_PLANNED_STEPS  # local steps of one round
MAX_ROUNDS = 10 ** 12        # global iterations of a job
MAX_SECONDS = 24 * 3600.0    # a step, an aggregation or a margin: a day at most
MAX_CLOCK = 10 ** 12         # a worker's clock in seconds (since the epoch, or since it started)
MAX_JOB_ID = 100             # characters of a job's id
# The header a job's requests carry its own secret in, where its first /init/ set one (a header, not a field: it
# stays out of URLs and logs).
JOB_SECRET_HEADER = "X-ESync-Job-Secret"

RANK = Field("r", INTEGER, "the worker's rank", minimum=0, maximum=MAX_WORKERS - 1)
ROUND = Field("t", INTEGER, "the global iteration (round) the worker is in", minimum=0, maximum=MAX_ROUNDS)
STEP_SECONDS = Field("c", NUMBER, "seconds per local step, as the worker measured them", minimum=0.0,
                     maximum=MAX_SECONDS)
WORKER_CLOCK = Field("te", NUMBER, "the worker's clock, kept for display", minimum=-MAX_CLOCK, maximum=MAX_CLOCK)
JOB = Field("job", TEXT, "the job's id, as /init/ answered or took it (absent: the server's only job)", required=False,
            maximum=MAX_JOB_ID)

INIT = Endpoint("/init/", "POST", (
    Field("num_workers", INTEGER, "the job's workers", minimum=1, maximum=MAX_WORKERS),
    Field("epsilon", NUMBER, "the readiness margin in seconds (absent: fitted to the step times)", required=False,
          minimum=0.0, maximum=MAX_SECONDS),
    Field("policy", TEXT, "the coordination rule (absent: apply)", required=False),
    Field("resumed", SWITCH, "the running job, set up again after the server lost it", required=False),
    Field("share", NUMBER, "adaptive: the largest share of a round the aggregation may idle the workers",
          required=False, minimum=0.0, maximum=1.0),
    Field("max_slowest_steps", INTEGER, "adaptive: the most local steps of the slowest worker per round",
          required=False, minimum=1, maximum=MAX_STEPS),
    Field("overlap", SWITCH, "adaptive: the aggregation runs while the workers compute the next round",
          required=False),
    Field("accept", INTEGER, "backup: the gradients a step applies", required=False, minimum=1,
          maximum=MAX_WORKERS),
    Field("liveness", NUMBER, "seconds without a request after which the job may make room for a new one (absent: "
          "the server's default)", required=False, minimum=1.0, maximum=MAX_SECONDS),
    JOB,
))
APPLY = Endpoint("/apply/", "POST", (
    RANK, Field("k", INTEGER, "local steps done in this round", minimum=0, maximum=MAX_STEPS), STEP_SECONDS,
    WORKER_CLOCK, JOB))
RESET = Endpoint("/reset/", "POST", (RANK, ROUND, WORKER_CLOCK, JOB))
PLAN = Endpoint("/plan/", "POST", (
    RANK, STEP_SECONDS,
    Field("a", NUMBER, "adaptive: seconds the worker's aggregation took", required=False, minimum=0.0,
          maximum=MAX_SECONDS), JOB))
ARRIVE = Endpoint("/arrive/", "POST", (RANK, ROUND, JOB))
WATCH = Endpoint("/watch/", "POST", (
    RANK, ROUND, Field("arrived", SWITCH, "the worker has arrived at the round's mini-batch boundary"),
    Field("wait", NUMBER, "the longest the answer may wait, in seconds", minimum=0.0, maximum=MAX_SECONDS), JOB))
STATE = Endpoint("/", "GET", (JOB,))
ENDPOINTS = (STATE, INIT, APPLY, RESET, PLAN, ARRIVE, WATCH)


def request(endpoint, **values):
    """The body of a request to `endpoint`: every value by its field's name, optional fields left out when None,
    switches as 0 or 1. A name the endpoint does not declare, or a required field left out, is a bug: TypeError."""
    body = {}
    for name, value in values.items():
        field = endpoint.by_name.get(name)
        if field is None:
            raise TypeError(f"{endpoint.path} has no field {name!r}")
        if value is not None:
            body[name] = int(value) if field.kind == SWITCH else value
    missing = endpoint.required - body.keys()
    if missing:
        raise TypeError(f"{endpoint.path} needs field {sorted(missing)[0]!r}")
    return body
