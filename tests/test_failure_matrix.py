"""No failure path hangs: for each role and phase, an injected exception or kill in a real hand-started job ends
every process of that job within --sync-timeout + 10 s, the failing one with one line naming what failed, and the
iteration logs written so far still summarize.

A new failure path joins by adding a Case. The jobs start one after another (each once the previous one has
joined, so that no job's startup competes with another's) and then fail side by side: the whole matrix costs
about one startup per case plus one bound.
"""
import glob
import os
import signal
import time
from dataclasses import dataclass

import pytest

from analysis import summary
from launcher.cluster import ProcessGroup, start_state_server
from tests.jobs import LENET_ARGS, start_job, wait_until
from training import modes

# Real processes, which mostly wait for the bound: beside the timed tests (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.beside_others]

SYNC_TIMEOUT = 6
BOUND = SYNC_TIMEOUT + 10
ALL_WORKERS = ("worker-0", "worker-1")
GIVE_UP_MESSAGES = ("no connection to", "no answer for", "never connected", "failed:")


@dataclass(frozen=True)
class Case:
    role: str
    phase: str
    kind: str                # raise or kill (injected), or sigkill: the test kills targets[0] once it trains
    targets: tuple           # the processes given the fault (a rank-filtered fault goes to every worker)
    after: int = 1
    rank: int = None
    mode: str = "sync"
    max_iters: int = 200     # a fault that never fires lets the job finish with exit 0, and the case fails
    survivors_say: tuple = ()  # what every worker that outlives the fault says, one of ({port}: the state server's)
    workers: int = 2         # 1 where no other worker takes part in the failure (its start costs a second of CPU)

    @property
    def spec(self):
        return ":".join([self.role, self.phase, self.kind, f"after={self.after}"]
                        + ([f"rank={self.rank}"] if self.rank is not None else []))

    @property
    def name(self):
        return f"{self.role}-{self.phase}-{self.kind}" + (f"-{self.mode}" if self.mode != "sync" else "")


CASES = [
    # first: the state client's retries take the longest to give up, the other cases start meanwhile
    # A worker that was waiting on the state server says so; one that was already in the aggregation, waiting on
    # that worker, says that it got no answer there.
    Case("state-server", "training", "sigkill", ("state-server",), mode="esync", max_iters=10 ** 6,
         survivors_say=("state server at http://127.0.0.1:{port} did not answer",
                        f"no answer for {SYNC_TIMEOUT} s during the aggregation of global iteration")),
    # next: the cases whose jobs run longest after they join; last, those that end soonest
    Case("worker", "leaving", "raise", ("worker-1",), max_iters=5),
    Case("server", "training", "raise", ("server-0",), after=100, mode="async", workers=1),
    Case("scheduler", "start", "raise", ("scheduler",), workers=1),
    Case("server", "start", "raise", ("server-0",), workers=1),
    Case("worker", "start", "raise", ("worker-1",)),
    Case("worker", "setup", "raise", ALL_WORKERS, rank=0),   # rank 0 fails before the servers are initialised
    Case("worker", "training", "raise", ("worker-1",), after=3),
    Case("worker", "aggregation", "kill", ("worker-1",), after=3),
    Case("worker", "training", "sigkill", ("worker-1",),
         survivors_say=(f"no answer for {SYNC_TIMEOUT} s during the aggregation of global iteration",)),
    Case("server", "training", "sigkill", ("server-0",), workers=1),
    Case("scheduler", "training", "sigkill", ("scheduler",), workers=1),
]


@dataclass
class Outcome:
    procs: list
    exits: dict              # process name -> (exit code, seconds since the matrix started)
    log_dir: str
    state_port: int = None


def start_case(case, base):
    group = ProcessGroup(os.path.join(base, case.name, "processes"))
    log_dir = os.path.join(base, case.name, "logs", "lenet", case.mode)
    timeout = ["--sync-timeout", str(SYNC_TIMEOUT)]
    worker_args = LENET_ARGS + timeout + ["-e", "0", "--max-iters", str(case.max_iters),
                                          "--train-dir", os.path.join(base, case.name, "train"), "--save-freq", "2"]
    port = None
    if modes.MODES[case.mode].state_server:
        port = start_state_server(group)
        worker_args += ["-port", str(port)]
    injected = case.kind != "sigkill"
    start_job(group, case.mode, worker_args, num_workers=case.workers, log_dir=log_dir, ps_args=timeout,
              envs={name: {"ESYNC_INJECT_FAULT": case.spec} for name in case.targets if injected})
    if not injected:
        wait_until(lambda: training(group) or group.failed(), timeout=60)
        os.kill(next(p for p in group.procs if p.name == case.targets[0]).pid, signal.SIGKILL)
    return group, Outcome(group.procs, {}, log_dir, port)


def training(group):
    return all("iter " in output(p) for p in group.procs if p.role == "worker")


def joined_or_failed(group):
    workers = [p for p in group.procs if p.role == "worker"]
    return (any(p.poll() is not None for p in group.procs)
            or all(f"of {len(workers)} on cpu" in open(p.output).read() for p in workers))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """Every case's job, run to its end; {case name: Outcome}."""
    base = str(tmp_path_factory.mktemp("failure-matrix"))
    started = time.monotonic()
    groups, outcomes = [], {}
    try:
        for case in CASES:
            group, outcomes[case.name] = start_case(case, base)
            groups.append(group)
            wait_until(lambda: joined_or_failed(group), timeout=60)
        everything = [p for g in groups for p in g.procs]

        def record_exits():
            for outcome in outcomes.values():
                for p in outcome.procs:
                    if p.name not in outcome.exits and p.poll() is not None:
                        outcome.exits[p.name] = (p.poll(), time.monotonic() - started)
            return all(p.poll() is not None for p in everything)

        wait_until(record_exits, timeout=BOUND + 60)
        yield outcomes
    finally:
        for group in groups:
            group.stop()


def output(proc):
    with open(proc.output, errors="replace") as f:
        return f.read()


def outputs(outcome):
    return "\n".join(f"--- {p.name} (exit {outcome.exits.get(p.name)})\n{output(p)[-1500:]}" for p in outcome.procs)


def faulted(case, outcome):
    """The process in which the fault was injected, or which the test killed."""
    if case.kind == "sigkill":
        return next(p for p in outcome.procs if p.name == case.targets[0])
    hits = [p for p in outcome.procs if "injecting a fault" in output(p)]
    assert len(hits) == 1, f"the fault fired in {len(hits)} processes\n{outputs(outcome)}"
    return hits[0]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_an_injected_fault_ends_every_process_of_the_job_within_the_bound(matrix, case):
    outcome = matrix[case.name]
    assert len(outcome.exits) == len(outcome.procs), f"processes still running\n{outputs(outcome)}"
    victim = faulted(case, outcome)
    victim_code, failed_at = outcome.exits[victim.name]
    last_exit = max(at for _, at in outcome.exits.values())

    assert last_exit - failed_at <= BOUND, f"{last_exit - failed_at:.1f} s after the fault\n{outputs(outcome)}"
    if case.kind in ("kill", "sigkill"):
        assert victim_code == -9, outputs(outcome)
    else:
        lines = [line for line in output(victim).splitlines() if "ERROR" in line]
        assert victim_code == 1 and len(lines) == 1, outputs(outcome)
        assert f"{case.role} failed: InjectedFault: fault injected at {case.role} {case.phase}" in lines[0]
        assert "Traceback" not in output(victim)
    for proc in outcome.procs:
        code, _ = outcome.exits[proc.name]
        assert "init 0 first" not in output(proc), outputs(outcome)  # no server dies of a pull before its init
        if proc is not victim and code != 0:
            assert code > 0, f"{proc.name} died of a signal\n{outputs(outcome)}"
            assert any(message in output(proc) for message in GIVE_UP_MESSAGES), outputs(outcome)
        if case.survivors_say and proc is not victim and proc.role == "worker":
            said = [message.format(port=outcome.state_port) in output(proc) for message in case.survivors_say]
            assert code > 0 and any(said), outputs(outcome)


@pytest.mark.parametrize("case", [c for c in CASES if c.phase not in ("start", "setup")], ids=lambda case: case.name)
def test_the_logs_written_before_the_fault_summarize(matrix, case):
    outcome = matrix[case.name]
    assert glob.glob(os.path.join(outcome.log_dir, "node", "*-worker*", "iter-*.txt")), outputs(outcome)

    result = summary.summarize_mode(os.path.dirname(outcome.log_dir), case.mode)

    devices = result["devices"]["node"]
    assert len(devices) == case.workers and all(device["iterations"] for device in devices.values())
