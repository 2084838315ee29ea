"""The worker sides of ESync's coordination rules (coordination/rules/): what a worker asks the state server, when,
and what it makes of the answer, with a stand-in for the state client. Real jobs under every policy:
tests/test_esync.py."""
import concurrent.futures
import os
import subprocess
import sys
import types

import pytest

from coordination.records import PLANNED_STEPS, PLAN_REASON
from coordination import rules
from coordination.rules import ESYNC_POLICIES, RULES
from launcher.cluster import ROOT


class Client:
    """Answers as a state server would, and remembers what it was asked."""

    def __init__(self, ready=False, plan=None):
        self.asked, self.ready, self.answer = [], ready, plan or {"k": 3}

    def reset(self, rank, t, te):
        self.asked.append(("reset", rank, t))

    def apply(self, rank, k, c, te, retry_for=None):
        self.asked.append(("apply", rank, k))
        return self.ready

    def plan_round(self, rank, c, a=None):
        self.asked.append(("plan", rank, c, a))
        return self.answer


class StoppedClock:
    """A clock that moves only when the test moves it: a rule's view of time, whatever the machine's load."""

    def __init__(self):
        self.seconds = 100.0

    def now(self):
        return self.seconds


class ESyncWorker:
    """What a rule's worker side reads of ESync's scheme."""

    def __init__(self, client):
        self.client, self.rank, self.step_seconds, self.aggregation_seconds = client, 1, 0.01, 0.5
        self.requests = concurrent.futures.ThreadPoolExecutor(1)
        self.clock = StoppedClock()
        self.opening, self.round_started = None, self.clock.now()

    def opened(self):
        opening, self.opening = self.opening, None
        return opening.result() if opening else None


def test_every_esync_policy_has_a_worker_side():
    assert ESYNC_POLICIES == ("apply", "plan", "nonblocking", "adaptive")
    assert all(RULES[name].worker for name in ESYNC_POLICIES)


def test_the_apply_rule_opens_a_round_with_reset_and_asks_after_every_step():
    client = Client(ready=True)
    esync = ESyncWorker(client)
    rule = RULES["apply"].worker(esync)

    rule.begin_round(completed=4)
    done = rule.round_done(2, esync.opened())

    assert done and client.asked == [("reset", 1, 4), ("apply", 1, 2)]


def test_the_plan_rule_asks_once_a_round_and_logs_the_steps_it_was_given():
    client = Client(plan={"k": 3})
    esync = ESyncWorker(client)
    rule = RULES["plan"].worker(esync)
    record = {}

    rule.begin_round(completed=1)
    opened = esync.opened()
    ends = [rule.round_done(steps, opened if steps == 1 else None) for steps in (1, 2, 3)]
    rule.record(record)

    assert ends == [False, False, True] and client.asked == [("plan", 1, 0.01, None)]
    assert record == {PLANNED_STEPS: 3}


@pytest.mark.parametrize("policy", ["plan", "adaptive"])
def test_a_planning_rules_first_round_sends_its_step_time_before_its_aggregation(policy):
    """Sent with the second round's request, it would come after the plans of the workers asking before it."""
    client = Client()
    esync = ESyncWorker(client)
    esync.step_seconds = None  # nothing measured before the first round
    rule = RULES[policy].worker(esync)

    rule.begin_round(completed=0)
    assert client.asked == []
    esync.step_seconds = 0.01  # the first step's time, which ends the round
    assert rule.round_done(1, esync.opened()) and client.asked == [("plan", 1, 0.01, None)]
    rule.begin_round(completed=1)
    esync.opened()
    assert client.asked[1:] == [("plan", 1, 0.01, 0.5 if policy == "adaptive" else None)]


def test_the_adaptive_rule_reports_its_aggregation_and_keeps_the_rounds_time_on_its_own_clock():
    client = Client(plan={"k": 40, "seconds": 0.05, "slowest_steps": 2, "aggregation": 0.2, "reason": "aggregation"})
    esync = ESyncWorker(client)
    rule = RULES["adaptive"].worker(esync)
    record = {}

    rule.begin_round(completed=1)
    before = rule.round_done(1, esync.opened())       # 0.01 s step, 0.05 s round: more steps fit
    esync.round_started -= 0.045
    after = rule.round_done(2, None)                  # the next step would end past the round's time
    rule.record(record)

    assert (before, after) == (False, True) and client.asked == [("plan", 1, 0.01, 0.5)]
    assert rule.reports_aggregation and record[PLAN_REASON] == "aggregation"


def test_the_nonblocking_rule_never_waits_for_its_answer_and_drops_the_step_ready_interrupts():
    client = Client(ready=True)
    esync = ESyncWorker(client)
    rule = RULES["nonblocking"].worker(esync)

    first = rule.round_done(1, None)  # asks and steps on
    esync.requests.shutdown(wait=True)  # the answer arrives while the next step runs

    assert first is False and rule.abandons_step() and client.asked == [("apply", 1, 1)]


@pytest.mark.parametrize("policy", ["apply", "plan", "nonblocking"])
def test_only_the_adaptive_rule_is_sized_by_the_round_sizing_options(policy):
    assert RULES[policy].worker.sized_by == () and RULES["adaptive"].worker.sized_by


def test_a_name_two_rule_modules_define_ends_the_process_in_one_line():
    first, second = (types.SimpleNamespace(NAME="same", RULE=object(), __name__=n) for n in ("one", "two"))

    assert list(rules.registry([first])) == ["same"]
    with pytest.raises(SystemExit, match="two coordination rules are named 'same'"):
        rules.registry([first, second])


@pytest.mark.parametrize("modules, message", [
    ("tests.no_such_rule", "ESYNC_RULE_MODULES: No module named 'tests.no_such_rule'"),
    ("coordination.rules.plan", "ESYNC_RULE_MODULES: two coordination rules are named 'plan'"),
])
def test_a_rule_module_that_cannot_be_registered_ends_the_process_in_one_line(modules, message):
    result = subprocess.run([sys.executable, "-c", "import coordination.rules"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env=dict(os.environ, **{rules.EXTRA_MODULES_VARIABLE: modules}))

    assert result.returncode == 1 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
