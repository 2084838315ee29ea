"""Tests of the ESync state server: the readiness rule with an injected clock, then the
HTTP endpoints through Django's test client."""

import json
import logging
import math
import socket
import threading
import time
from unittest import mock
from urllib.parse import urlencode

import pytest
from django.test import Client, SimpleTestCase, override_settings
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from coordinator import views
from coordinator.management.commands.runserver import NoDelayWSGIServer
from coordinator.state import (
    CAPPED,
    COVERS_AGGREGATION,
    FIRST_ROUND,
    MAX_PLANNED_STEPS,
    ONE_STEP,
    Coordinator,
    FieldError,
    NotInitialised,
    RoundPlan,
    Settings,
    WorkerRecord,
    adaptive_plan,
    is_ready,
    margin,
    planned_steps,
    slowest_steps,
    slowest_worker,
)

FORM = "application/x-www-form-urlencoded"


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def worker(rank, c, k=1, t=0, ready=False, step_start=0.0, a=None):
    return WorkerRecord(rank=rank, step_start=step_start, c=c, k=k, t=t, ready=ready, a=a)



@pytest.fixture(autouse=True)
def quiet_coordinator_console():
    """Keeps the hundreds of expected 4xx log lines off the console under `pytest -s`;
    assertLogs still sees them because it installs its own handler."""
    with mock.patch.object(logging.getLogger("coordinator"), "handlers", [logging.NullHandler()]):
        yield


# ---------------------------------------------------------------- the rule itself


def test_slowest_worker_is_ready_after_one_step():
    workers = [worker(0, c=1.0), worker(1, c=0.1)]

    assert is_ready(workers, 0, epsilon=0.0, now=0.0)


def test_slowest_worker_ties_go_to_the_lowest_rank():
    workers = [worker(0, c=0.1), worker(1, c=0.5), worker(2, c=0.5)]

    assert slowest_worker(workers).rank == 1


def test_fast_worker_keeps_stepping_when_another_step_fits_before_the_slowest_ends():
    # Slowest started its 1.0 s step at 0; at 0.5 it has 0.5 s left; 0.3 + 0.19 < 0.5.
    workers = [worker(0, c=1.0, step_start=0.0), worker(1, c=0.3)]

    assert not is_ready(workers, 1, epsilon=0.19, now=0.5)


def test_fast_worker_stops_when_its_step_plus_epsilon_exceeds_the_time_left():
    workers = [worker(0, c=1.0, step_start=0.0), worker(1, c=0.3)]

    assert is_ready(workers, 1, epsilon=0.21, now=0.5)


def test_worker_without_steps_is_never_ready():
    workers = [worker(0, c=1.0, k=0), worker(1, c=0.1)]

    assert not is_ready(workers, 0, epsilon=10.0, now=50.0)


def test_while_a_step_time_is_unknown_every_worker_is_ready_after_a_step():
    # The one that never reported may be waiting in the aggregation already (after a state server restart).
    workers = [worker(0, c=0.1), WorkerRecord(rank=1, step_start=0.0)]

    assert is_ready(workers, 0, epsilon=10.0, now=50.0)


def test_waiting_slowest_in_the_same_round_makes_others_ready():
    workers = [worker(0, c=1.0, t=3, ready=True, step_start=0.0), worker(1, c=0.1, t=3)]

    assert is_ready(workers, 1, epsilon=0.0, now=0.0)


def test_stale_ready_flag_of_slowest_in_an_older_round_is_ignored():
    # Worker 1 already reset into round 4 while the slowest still waits in round 3:
    # the slowest has a whole step of round 4 ahead of it.
    workers = [worker(0, c=1.0, t=3, ready=True, step_start=0.0), worker(1, c=0.1, t=4)]

    assert not is_ready(workers, 1, epsilon=0.05, now=0.9)


def test_slowest_in_an_older_round_counts_as_a_full_step_away():
    workers = [worker(0, c=1.0, t=3, step_start=0.0), worker(1, c=0.9, t=4)]

    assert is_ready(workers, 1, epsilon=0.11, now=0.9)


def test_auto_epsilon_is_a_tenth_of_the_slowest_step():
    assert margin(None, worker(0, c=0.8)) == pytest.approx(0.08)


def test_auto_epsilon_keeps_a_fast_worker_stepping():
    # 0.5 s left of the slowest's step; 0.35 + 0.1 (auto margin) < 0.5.
    workers = [worker(0, c=1.0, step_start=0.0), worker(1, c=0.35)]

    assert not is_ready(workers, 1, epsilon=None, now=0.5)


def test_auto_epsilon_stops_a_worker_whose_step_would_overrun():
    workers = [worker(0, c=1.0, step_start=0.0), worker(1, c=0.45)]

    assert is_ready(workers, 1, epsilon=None, now=0.5)


@pytest.mark.parametrize("speedup", [1, 2, 3, 4, 7, 10])
def test_plan_gives_a_k_times_faster_worker_k_steps(speedup):
    workers = [worker(0, c=0.3), worker(1, c=0.3 / speedup)]

    assert planned_steps(workers, 1, epsilon=0.0) == speedup


def test_plan_with_auto_margin_rounds_down():
    workers = [worker(0, c=0.4), worker(1, c=0.1)]

    assert planned_steps(workers, 1, epsilon=None) == 4  # floor(0.44 / 0.1)


def test_plan_answers_one_step_while_a_step_time_is_unknown():
    workers = [WorkerRecord(rank=0, step_start=0.0), worker(1, c=0.1)]

    assert planned_steps(workers, 1, epsilon=0.0) == 1


step_times = st.floats(min_value=5e-324, max_value=1.7e308)


@hypothesis_settings(max_examples=300, derandomize=True, database=None)
@given(c_slow=step_times, c_fast=step_times, epsilon=st.none() | step_times,
       elapsed=st.floats(min_value=0, max_value=1e12))
def test_rule_and_plan_survive_extreme_step_times(c_slow, c_fast, epsilon, elapsed):
    workers = [worker(0, c=c_slow, step_start=0.0), worker(1, c=c_fast)]

    steps = planned_steps(workers, 1, epsilon)
    ready = is_ready(workers, 1, epsilon, now=elapsed)

    assert 1 <= steps <= MAX_PLANNED_STEPS
    assert isinstance(ready, bool)


# ---------------------------------------------------------------- the adaptive policy's round sizes


@pytest.mark.parametrize("aggregation, share, expected", [
    (0.0, 0.1, (1, ONE_STEP)),             # free aggregation: the paper's round
    (0.01, 0.1, (1, ONE_STEP)),            # T >= 0.09 s: one step of 0.1 s covers it
    (0.05, 0.1, (5, COVERS_AGGREGATION)),  # T >= 0.45 s: 5 steps of 0.1 s
    (0.05, 0.5, (1, ONE_STEP)),            # T >= 0.05 s
    (0.3, 0.2, (8, CAPPED)),               # T >= 1.2 s: 12 steps, capped at 8
])
def test_blocking_rounds_last_until_the_aggregation_is_at_most_its_share(aggregation, share, expected):
    assert slowest_steps(aggregation, 0.1, Settings(share=share, max_slowest_steps=8)) == expected


@pytest.mark.parametrize("aggregation, expected", [
    (0.05, (1, ONE_STEP)),             # T >= 0.045 s
    (0.25, (3, COVERS_AGGREGATION)),   # T >= 0.225 s: 3 steps of 0.1 s
    (2.0, (8, CAPPED)),
])
def test_overlapped_rounds_compute_about_as_long_as_the_aggregation_travels(aggregation, expected):
    assert slowest_steps(aggregation, 0.1, Settings(share=0.1, max_slowest_steps=8, overlap=True)) == expected


def test_the_formula_holds_for_the_steps_it_chooses():
    settings = Settings(share=0.1, max_slowest_steps=1000)
    for aggregation in (0.003, 0.02, 0.13, 0.7):
        m, _ = slowest_steps(aggregation, 0.011, settings)
        idle_share = aggregation / (m * 0.011 + aggregation)
        shorter_idle_share = aggregation / ((m - 1) * 0.011 + aggregation)
        assert idle_share <= 0.1 + 1e-9
        assert m == 1 or shorter_idle_share > 0.1


def test_adaptive_plan_gives_every_worker_the_slowest_workers_round():
    # the slowest (0.4 s) reports the shortest aggregation: 0.2 s, so T >= 1.8 s, 5 slowest steps (2.0 s)
    workers = [worker(0, c=0.4, a=0.2), worker(1, c=0.1, a=0.5), worker(2, c=0.05, a=0.6)]
    settings = Settings(share=0.1, max_slowest_steps=8)

    plans = [adaptive_plan(workers, rank, 0.0, settings) for rank in range(3)]

    assert plans == [RoundPlan(5, 5, 0.2, COVERS_AGGREGATION, 2.0), RoundPlan(20, 5, 0.2, COVERS_AGGREGATION, 2.0),
                     RoundPlan(40, 5, 0.2, COVERS_AGGREGATION, 2.0)]


def test_adaptive_plan_is_the_plan_policys_until_an_aggregation_is_reported():
    workers = [worker(0, c=0.4), worker(1, c=0.1)]

    assert adaptive_plan(workers, 1, 0.0, Settings()) == RoundPlan(planned_steps(workers, 1, 0.0), 1, None, ONE_STEP,
                                                                  0.4)
    assert adaptive_plan([WorkerRecord(rank=0, step_start=0.0), worker(1, c=0.1)], 1, 0.0, Settings()) == \
        RoundPlan(1, 1, None, FIRST_ROUND)


@hypothesis_settings(max_examples=300, derandomize=True, database=None)
@given(c_slow=step_times, c_fast=step_times, aggregation=st.floats(min_value=0, max_value=1.7e308),
       share=st.floats(min_value=1e-9, max_value=1.0), overlap=st.booleans(),
       cap=st.integers(min_value=1, max_value=MAX_PLANNED_STEPS))
def test_adaptive_plan_survives_extreme_times(c_slow, c_fast, aggregation, share, overlap, cap):
    workers = [worker(0, c=c_slow, a=aggregation), worker(1, c=c_fast)]

    plan = adaptive_plan(workers, 1, None, Settings(share=share, max_slowest_steps=cap, overlap=overlap))

    assert 1 <= plan.steps <= MAX_PLANNED_STEPS
    assert 1 <= plan.slowest_steps <= cap
    assert 0 < plan.seconds < math.inf


# ---------------------------------------------------------------- Coordinator


def test_coordinator_keeps_a_worker_ready_until_its_reset():
    clock = FakeClock()
    coordinator = Coordinator(clock=clock)
    coordinator.init(2, epsilon=0.0)
    coordinator.apply(0, k=1, c=1.0, te=0.0)
    clock.advance(0.95)
    assert coordinator.apply(1, k=1, c=0.1, te=0.0)  # 0.05 s left of the slowest's step

    coordinator.reset(0, t=1, te=0.0)  # the rule alone would now say "keep stepping"
    still_ready = coordinator.apply(1, k=2, c=0.1, te=0.0)
    coordinator.reset(1, t=1, te=0.0)
    ready_in_next_round = coordinator.apply(1, k=1, c=0.1, te=0.0)

    assert still_ready
    assert not ready_in_next_round


def test_an_apply_with_no_step_done_is_never_ready_even_after_a_ready_answer():
    coordinator = Coordinator(clock=FakeClock())
    coordinator.init(2, epsilon=0.0)
    coordinator.apply(0, k=1, c=0.1, te=0.0)
    assert coordinator.apply(1, k=1, c=1.0, te=0.0)  # the slowest is ready after its step

    assert not coordinator.apply(1, k=0, c=1.0, te=0.0)


def test_coordinator_measures_time_left_on_its_own_clock():
    clock = FakeClock(now=1000.0)
    coordinator = Coordinator(clock=clock)
    coordinator.init(2, epsilon=0.0)
    coordinator.apply(1, k=1, c=0.2, te=0.0)
    coordinator.apply(0, k=1, c=1.0, te=-5e6)  # the worker's clock is far off; ignored
    coordinator.reset(0, t=1, te=0.0)
    coordinator.reset(1, t=1, te=0.0)

    clock.advance(0.5)
    keeps_stepping = coordinator.apply(1, k=1, c=0.2, te=0.0)
    clock.advance(0.35)
    stops = coordinator.apply(1, k=2, c=0.2, te=0.0)

    assert not keeps_stepping
    assert stops


def test_coordinator_rejects_a_rank_out_of_range():
    coordinator = Coordinator(clock=FakeClock())
    coordinator.init(2)

    with pytest.raises(FieldError) as raised:
        coordinator.apply(2, k=1, c=0.1, te=0.0)

    assert raised.value.field_name == "r"


def test_coordinator_refuses_worker_requests_before_init():
    with pytest.raises(NotInitialised):
        Coordinator(clock=FakeClock()).reset(0, t=0, te=0.0)


def test_coordinator_init_starts_a_fresh_job():
    coordinator = Coordinator(clock=FakeClock())
    coordinator.init(2, epsilon=0.0)
    coordinator.apply(0, k=1, c=1.0, te=0.0)

    coordinator.init(3)

    snapshot = coordinator.snapshot()
    assert snapshot["num_workers"] == 3
    assert snapshot["epsilon"] is None
    assert [w["applies"] for w in snapshot["workers"]] == [0, 0, 0]
    assert snapshot["requests"] == {"apply": 0, "reset": 0, "plan": 0, "arrive": 0, "watch": 0}


def test_a_resumed_job_makes_every_worker_ready_after_a_step_until_each_has_opened_a_round():
    """After a restart the server cannot know that the slow worker already waits in the aggregation: a fast worker
    told to step on would never stop, and the slow one would wait for it until --sync-timeout."""
    coordinator = Coordinator(clock=FakeClock())
    coordinator.init(2, resumed=True)
    coordinator.apply(0, k=1, c=4.0, te=0.0)  # the slow worker's last question; from now on it waits
    coordinator.reset(1, t=13, te=0.0)         # the fast worker's round opened after the restart

    assert coordinator.apply(1, k=1, c=1.0, te=0.0)

    coordinator.reset(0, t=14, te=0.0)
    coordinator.reset(1, t=14, te=0.0)
    assert not coordinator.apply(1, k=1, c=1.0, te=0.0)  # every round known: the rule (the slowest 4 s away)


def test_coordinator_counts_stay_consistent_under_many_threads():
    coordinator = Coordinator()
    coordinator.init(4, epsilon=0.01)

    def hammer(rank):
        for step in range(500):
            coordinator.apply(rank, k=step % 5, c=0.01 * (rank + 1), te=0.0)
            if step % 5 == 4:
                coordinator.reset(rank, t=step // 5 + 1, te=0.0)

    threads = [threading.Thread(target=hammer, args=(i % 4,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    snapshot = coordinator.snapshot()
    assert snapshot["requests"] == {"apply": 4000, "reset": 800, "plan": 0, "arrive": 0, "watch": 0}
    assert [w["applies"] for w in snapshot["workers"]] == [1000] * 4


# ---------------------------------------------------------------- HTTP endpoints


@override_settings(ESYNC_STATE_TOKEN=None)
class EndpointTestCase(SimpleTestCase):
    """Gives each test a fresh coordinator with a fake clock."""

    def setUp(self):
        self.clock = FakeClock()
        self.coordinator = Coordinator(clock=self.clock)
        patcher = mock.patch.object(views, "COORDINATOR", self.coordinator)
        patcher.start()
        self.addCleanup(patcher.stop)

    def post(self, path, **fields):
        return self.client.post(path, urlencode(fields), content_type=FORM)

    def post_json(self, path, body):
        return self.client.post(path, json.dumps(body), content_type="application/json")

    def init(self, num_workers=2, **fields):
        response = self.post("/init/", num_workers=num_workers, **fields)
        self.assertEqual(response.status_code, 200)

    def assertJsonError(self, response, status, field=None):
        self.assertEqual(response.status_code, status)
        self.assertEqual(response["Content-Type"], "application/json")
        body = response.json()
        self.assertIn("error", body)
        if field is not None:
            self.assertEqual(body["field"], field)
            self.assertIn(f"'{field}'", body["error"])


class InitEndpointTests(EndpointTestCase):
    def test_init_answers_ok_with_the_job_settings(self):
        response = self.post("/init/", num_workers=3, epsilon=0.25, policy="plan")

        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.json(), {"ok": 1, "num_workers": 3, "epsilon": 0.25,
                                           "policy": "plan", "margin": None})

    def test_init_without_epsilon_uses_the_automatic_margin(self):
        response = self.post("/init/", num_workers=2)

        self.assertEqual(response.json()["epsilon"], None)
        self.assertEqual(response.json()["policy"], "apply")

    def test_init_accepts_a_json_body(self):
        response = self.post_json("/init/", {"num_workers": 2, "epsilon": 0})

        self.assertEqual(response.json()["epsilon"], 0.0)

    def test_init_answer_is_compact_json_with_a_length(self):
        response = self.post("/init/", num_workers=1)

        self.assertNotIn(b", ", response.content)
        self.assertEqual(response["Content-Length"], str(len(response.content)))

    def test_init_logs_one_line(self):
        with self.assertLogs("coordinator", "INFO") as logs:
            self.post("/init/", num_workers=2)

        self.assertEqual(len(logs.records), 1)

    def test_init_rejects_missing_num_workers(self):
        self.assertJsonError(self.post("/init/"), 400, "num_workers")

    def test_init_rejects_bad_num_workers(self):
        for value in ["two", "1.5", "0", "-3", "100000", "nan"]:
            with self.subTest(value=value):
                self.assertJsonError(self.post("/init/", num_workers=value), 400, "num_workers")

    def test_init_rejects_bad_epsilon(self):
        for value in ["abc", "nan", "inf", "-inf", "-0.1", "1e400"]:
            with self.subTest(value=value):
                response = self.post("/init/", num_workers=2, epsilon=value)
                self.assertJsonError(response, 400, "epsilon")

    def test_init_rejects_an_unknown_policy(self):
        self.assertJsonError(self.post("/init/", num_workers=2, policy="async"), 400, "policy")

    def test_init_rejects_malformed_json(self):
        response = self.client.post("/init/", "{not json", content_type="application/json")

        self.assertJsonError(response, 400, "body")

    def test_init_rejects_a_json_body_that_is_not_an_object(self):
        self.assertJsonError(self.post_json("/init/", [2]), 400, "body")

    def test_init_rejects_json_booleans_as_numbers(self):
        self.assertJsonError(self.post_json("/init/", {"num_workers": True}), 400, "num_workers")

    def test_init_rejects_an_oversized_body(self):
        response = self.post("/init/", num_workers=2, padding="x" * 100_000)

        self.assertJsonError(response, 400, "body")

    def test_init_rejects_a_broken_multipart_body(self):
        response = self.client.post("/init/", b"garbage", content_type="multipart/form-data")

        self.assertJsonError(response, 400, "body")


class ApplyEndpointTests(EndpointTestCase):
    VALID = {"r": 0, "k": 1, "c": 0.5, "te": 1234.5}

    def apply(self, **overrides):
        return self.post("/apply/", **{**self.VALID, **overrides})

    def without(self, name):
        return {key: value for key, value in self.VALID.items() if key != name}

    def test_apply_before_init_is_409(self):
        self.assertJsonError(self.apply(), 409)

    def test_slowest_worker_is_told_ready(self):
        self.init(2, epsilon=0.0)
        self.apply(r=1, c=0.1)

        response = self.apply(r=0, c=1.0)

        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.json(), {"ready": 1})

    def test_fast_worker_is_told_to_keep_stepping(self):
        self.init(2, epsilon=0.0)
        self.apply(r=0, k=0, c=1.0)  # the slowest, known, in its step

        response = self.apply(r=1, c=0.1)

        self.assertEqual(response.json(), {"ready": 0})

    def test_apply_accepts_a_json_body(self):
        self.init(1)

        response = self.post_json("/apply/", self.VALID)

        self.assertEqual(response.json(), {"ready": 1})

    def test_apply_accepts_the_path_without_trailing_slash(self):
        self.init(1)

        response = self.client.post("/apply", urlencode(self.VALID), content_type=FORM)

        self.assertEqual(response.json(), {"ready": 1})

    def test_apply_with_zero_steps_may_report_zero_step_time(self):
        self.init(1)

        response = self.apply(k=0, c=0)

        self.assertEqual(response.json(), {"ready": 0})

    def test_apply_does_not_log(self):
        self.init(1)

        with self.assertNoLogs("coordinator", "DEBUG"):
            self.apply()

    def test_apply_rejects_each_missing_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                response = self.post("/apply/", **self.without(name))
                self.assertJsonError(response, 400, name)

    def test_apply_rejects_each_non_numeric_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                self.assertJsonError(self.apply(**{name: "abc"}), 400, name)

    def test_apply_rejects_each_nan_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                self.assertJsonError(self.apply(**{name: "nan"}), 400, name)

    def test_apply_rejects_each_infinite_field(self):
        self.init(2)
        for name in self.VALID:
            for value in ["inf", "-inf", "1e999"]:
                with self.subTest(field=name, value=value):
                    self.assertJsonError(self.apply(**{name: value}), 400, name)

    def test_apply_rejects_negative_rank_steps_and_step_time(self):
        self.init(2)
        for name in ["r", "k", "c"]:
            with self.subTest(field=name):
                self.assertJsonError(self.apply(**{name: -1}), 400, name)

    def test_apply_rejects_zero_step_time_after_steps(self):
        self.init(2)

        self.assertJsonError(self.apply(k=3, c=0), 400, "c")

    def test_apply_rejects_a_rank_out_of_range(self):
        self.init(2)

        self.assertJsonError(self.apply(r=2), 400, "r")

    def test_apply_rejects_a_huge_rank(self):
        self.init(2)

        self.assertJsonError(self.apply(r=10**30), 400, "r")

    def test_get_on_apply_is_405_json(self):
        response = self.client.get("/apply/")

        self.assertJsonError(response, 405)
        self.assertEqual(response["Allow"], "POST")


class ResetEndpointTests(EndpointTestCase):
    VALID = {"r": 1, "t": 1, "te": 99.0}

    def test_reset_before_init_is_409(self):
        self.assertJsonError(self.post("/reset/", **self.VALID), 409)

    def test_reset_starts_the_next_round(self):
        self.init(2, epsilon=0.0)
        self.post("/apply/", r=1, k=1, c=2.0, te=0)

        response = self.post("/reset/", **self.VALID)

        self.assertEqual(response.json(), {"ok": 1})
        record = self.client.get("/").json()["workers"][1]
        self.assertEqual((record["k"], record["ready"], record["t"]), (0, False, 1))

    def test_reset_rejects_each_missing_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                fields = {key: value for key, value in self.VALID.items() if key != name}
                self.assertJsonError(self.post("/reset/", **fields), 400, name)

    def test_reset_rejects_each_bad_value(self):
        self.init(2)
        for name in self.VALID:
            for value in ["x", "nan", "inf"]:
                with self.subTest(field=name, value=value):
                    response = self.post("/reset/", **{**self.VALID, name: value})
                    self.assertJsonError(response, 400, name)

    def test_reset_rejects_a_negative_iteration(self):
        self.init(2)

        self.assertJsonError(self.post("/reset/", **{**self.VALID, "t": -1}), 400, "t")

    def test_reset_rejects_a_rank_out_of_range(self):
        self.init(2)

        self.assertJsonError(self.post("/reset/", **{**self.VALID, "r": 5}), 400, "r")

    def test_get_on_reset_is_405_json(self):
        self.assertJsonError(self.client.get("/reset/"), 405)


class PlanEndpointTests(EndpointTestCase):
    def test_plan_before_init_is_409(self):
        self.assertJsonError(self.post("/plan/", r=0, c=0.1), 409)

    def test_plan_is_one_step_while_a_step_time_is_unknown(self):
        self.init(2, policy="plan")

        self.assertEqual(self.post("/plan/", r=0, c=0.1).json(), {"k": 1})

    def test_plan_gives_a_four_times_faster_worker_four_steps(self):
        self.init(2, epsilon=0.0, policy="plan")
        self.post("/plan/", r=0, c=0.8)

        response = self.post("/plan/", r=1, c=0.2)

        self.assertEqual(response.json(), {"k": 4})

    def test_plan_for_extreme_step_times_is_bounded(self):
        self.init(2, epsilon=1e308)
        self.post("/plan/", r=0, c=1.7e308)

        response = self.post("/plan/", r=1, c=5e-324)

        self.assertEqual(response.json(), {"k": MAX_PLANNED_STEPS})

    def test_plan_rejects_zero_step_time(self):
        self.init(2)

        self.assertJsonError(self.post("/plan/", r=0, c=0), 400, "c")

    def test_plan_rejects_each_bad_value(self):
        self.init(2)
        for name in ["r", "c"]:
            for value in ["", "x", "nan", "inf", "-1"]:
                with self.subTest(field=name, value=value):
                    fields = {"r": 0, "c": 0.1, name: value}
                    self.assertJsonError(self.post("/plan/", **fields), 400, name)

    def test_adaptive_plan_takes_the_aggregation_time_and_says_how_it_sized_the_round(self):
        self.init(2, epsilon=0.0, policy="adaptive", share=0.5, max_slowest_steps=4)
        self.post("/plan/", r=0, c=0.2, a=0.5)  # T >= 0.5 s: 3 steps of 0.2 s

        plan = self.post("/plan/", r=1, c=0.1, a=0.9).json()

        self.assertAlmostEqual(plan.pop("seconds"), 0.6)
        self.assertEqual(plan, {"k": 6, "slowest_steps": 3, "aggregation": 0.5, "reason": "aggregation"})

    def test_the_plan_policy_ignores_the_aggregation_time(self):
        self.init(2, epsilon=0.0, policy="plan")
        self.post("/plan/", r=0, c=0.2, a=5.0)

        self.assertEqual(self.post("/plan/", r=1, c=0.1, a=5.0).json(), {"k": 2})

    def test_init_of_an_adaptive_job_answers_its_sizing(self):
        response = self.post("/init/", num_workers=2, policy="adaptive", overlap=1)

        self.assertEqual(response.json()["share"], Settings().share)
        self.assertEqual(response.json()["max_slowest_steps"], Settings().max_slowest_steps)
        self.assertIs(response.json()["overlap"], True)

    def test_init_rejects_bad_sizing(self):
        for name, value in [("share", "0"), ("share", "1.5"), ("share", "x"), ("max_slowest_steps", "0"),
                            ("max_slowest_steps", "2.5"), ("overlap", "2")]:
            with self.subTest(field=name, value=value):
                self.assertJsonError(self.post("/init/", num_workers=2, policy="adaptive", **{name: value}), 400, name)

    def test_plan_rejects_a_bad_aggregation_time(self):
        self.init(2, policy="adaptive")
        for value in ["x", "nan", "inf", "-1"]:
            with self.subTest(value=value):
                self.assertJsonError(self.post("/plan/", r=0, c=0.1, a=value), 400, "a")

    def test_get_on_plan_is_405_json(self):
        self.assertJsonError(self.client.get("/plan/"), 405)


class RoundEndpointTests(EndpointTestCase):
    """NBSSGD: /arrive/ and the long-polled /watch/."""

    def test_arrive_before_init_is_409(self):
        self.assertJsonError(self.post("/arrive/", r=0, t=0), 409)

    def test_the_first_arrival_finishes_the_round_and_the_last_gathers_it(self):
        self.init(3, policy="nbsync")

        answers = [self.post("/arrive/", r=rank, t=5).json() for rank in (1, 0, 2)]

        self.assertEqual(answers, [{"finished": True, "gathered": False}, {"finished": True, "gathered": False},
                                   {"finished": True, "gathered": True}])

    def test_a_repeated_arrival_counts_once(self):
        self.init(2, policy="nbsync")
        self.post("/arrive/", r=0, t=0)

        self.assertEqual(self.post("/arrive/", r=0, t=0).json()["gathered"], False)

    def test_rounds_are_independent(self):
        self.init(2, policy="nbsync")
        self.post("/arrive/", r=0, t=0)
        self.post("/arrive/", r=1, t=0)

        self.assertEqual(self.post("/watch/", r=0, t=1, arrived=0, wait=0).json(),
                         {"finished": False, "gathered": False})

    def test_watch_answers_after_its_wait_when_nothing_happens(self):
        self.init(2, policy="nbsync")

        response = self.post("/watch/", r=0, t=0, arrived=0, wait=0.01)

        self.assertEqual(response.json(), {"finished": False, "gathered": False})

    def test_an_arrived_watch_repeats_the_arrival_for_a_restarted_server(self):
        self.init(2, policy="nbsync")
        self.post("/arrive/", r=0, t=3)
        self.init(2, policy="nbsync")  # what rank 0 does after a restart

        self.post("/watch/", r=0, t=3, arrived=1, wait=0)

        self.assertEqual(self.post("/arrive/", r=1, t=3).json()["gathered"], True)

    def test_a_resumed_job_counts_the_round_in_progress_as_gathered_once_anyone_arrived(self):
        # Rank 0 was told "gathered" just before the restart and waits in the aggregation; it will not arrive again.
        self.init(3, policy="nbsync", resumed=1)

        first = self.post("/watch/", r=1, t=7, arrived=1, wait=0).json()
        later = self.post("/arrive/", r=2, t=8).json()

        self.assertEqual(first, {"finished": True, "gathered": True})
        self.assertEqual(later, {"finished": True, "gathered": False})

    def test_a_new_job_waits_for_every_arrival_in_its_first_round(self):
        self.init(3, policy="nbsync")

        self.assertEqual(self.post("/arrive/", r=1, t=0).json(), {"finished": True, "gathered": False})

    def test_resumed_must_be_0_or_1(self):
        for value in ["2", "x", "-1"]:
            with self.subTest(value=value):
                self.assertJsonError(self.post("/init/", num_workers=2, resumed=value), 400, "resumed")

    def test_old_rounds_count_as_gathered(self):
        self.init(2, policy="nbsync")
        for t in range(10):
            self.post("/arrive/", r=0, t=t)

        self.assertEqual(self.post("/watch/", r=1, t=0, arrived=0, wait=0).json(),
                         {"finished": True, "gathered": True})
        self.assertLessEqual(len(self.client.get("/").json()["rounds"]), 4)

    def test_round_requests_reject_bad_values(self):
        self.init(2, policy="nbsync")
        cases = [("/arrive/", "r", "2"), ("/arrive/", "t", "-1"), ("/arrive/", "t", "x"),
                 ("/watch/", "arrived", "2"), ("/watch/", "wait", "-1"), ("/watch/", "wait", "nan")]
        for path, name, value in cases:
            with self.subTest(path=path, field=name, value=value):
                fields = {"r": 0, "t": 0, "arrived": 0, "wait": 0, name: value}
                self.assertJsonError(self.post(path, **fields), 400, name)

    def test_get_on_round_endpoints_is_405_json(self):
        for path in ("/arrive/", "/watch/"):
            self.assertJsonError(self.client.get(path), 405)


def test_a_long_poll_wakes_up_when_the_round_finishes_and_when_it_gathers():
    coordinator = Coordinator()
    coordinator.init(2, policy="nbsync")
    answers = []

    def watch(arrived):
        answers.append(coordinator.watch(1, 0, arrived, wait=10.0))

    watcher = threading.Thread(target=watch, args=(False,))
    watcher.start()
    coordinator.arrive(0, 0)
    watcher.join(5)
    watcher = threading.Thread(target=watch, args=(True,))
    watcher.start()
    watcher.join(5)

    assert answers == [{"finished": True, "gathered": False}, {"finished": True, "gathered": True}]


def test_a_long_poll_of_a_worker_still_missing_waits_its_full_time():
    coordinator = Coordinator()
    coordinator.init(3, policy="nbsync")
    coordinator.arrive(0, 0)

    started = time.monotonic()
    answer = coordinator.watch(1, 0, True, wait=0.2)

    assert answer == {"finished": True, "gathered": False}
    assert time.monotonic() - started >= 0.2


class BackupEndpointTests(EndpointTestCase):
    """SSGD with backup workers: a step applies the first `accept` gradients that /arrive/, the rest are late."""

    def test_the_first_n_gradients_are_accepted_and_the_late_one_is_told_so(self):
        self.init(3, policy="backup", accept=2)

        answers = [self.post("/arrive/", r=rank, t=4).json() for rank in (2, 0, 1)]

        self.assertEqual([a["accepted"] for a in answers], [True, True, False])
        self.assertEqual([a["finished"] for a in answers], [False, True, True])
        self.assertEqual(answers[-1]["arrived"], [0, 2])

    def test_a_watch_returns_once_the_step_closes_with_whose_gradients_it_holds(self):
        self.init(3, policy="backup", accept=2)
        self.post("/arrive/", r=1, t=0)
        open_ = self.post("/watch/", r=2, t=0, arrived=0, wait=0).json()
        self.post("/arrive/", r=0, t=0)

        closed = self.post("/watch/", r=2, t=0, arrived=0, wait=0).json()

        self.assertEqual(open_, {"finished": False, "gathered": False, "arrived": [1]})
        self.assertEqual(closed, {"finished": True, "gathered": True, "arrived": [0, 1]})

    def test_a_repeated_arrival_counts_once_and_stays_accepted(self):
        self.init(3, policy="backup", accept=2)
        self.post("/arrive/", r=0, t=0)

        again = self.post("/arrive/", r=0, t=0).json()

        self.assertEqual((again["accepted"], again["finished"]), (True, False))

    def test_a_gradient_of_a_step_long_closed_is_late(self):
        self.init(2, policy="backup", accept=1)
        for t in range(10):
            self.post("/arrive/", r=0, t=t)

        answer = self.post("/arrive/", r=1, t=2).json()

        self.assertEqual((answer["accepted"], answer["finished"]), (False, True))

    def test_accept_must_be_given_and_at_most_the_workers(self):
        for fields in [{}, {"accept": 4}, {"accept": 0}, {"accept": "x"}]:
            with self.subTest(fields=fields):
                self.assertJsonError(self.post("/init/", num_workers=3, policy="backup", **fields), 400, "accept")


class StateEndpointTests(EndpointTestCase):
    def test_state_before_init_shows_no_job(self):
        response = self.client.get("/")

        self.assertEqual(response.status_code, 200)
        self.assertIsNone(response.json()["num_workers"])

    def test_state_shows_workers_and_request_counts(self):
        self.init(2, epsilon=0.5)
        self.post("/apply/", r=0, k=1, c=0.3, te=7.0)
        self.post("/reset/", r=1, t=1, te=8.0)
        self.post("/plan/", r=1, c=0.1)

        state = self.client.get("/").json()

        self.assertEqual(state["requests"], {"apply": 1, "reset": 1, "plan": 1, "arrive": 0, "watch": 0})
        self.assertEqual(state["workers"][0]["te"], 7.0)
        self.assertEqual(state["workers"][1]["c"], 0.1)
        self.assertEqual(state["epsilon"], 0.5)

    def test_post_on_state_is_405_json(self):
        self.assertJsonError(self.client.post("/"), 405)


class RoutingAndAccessTests(EndpointTestCase):
    def test_unknown_path_is_404_json(self):
        self.assertJsonError(self.client.get("/no/such/thing"), 404)

    @override_settings(DEBUG=True)
    def test_unknown_path_is_404_json_with_debug_on(self):
        self.assertJsonError(self.client.post("/admin/"), 404)

    @override_settings(ALLOWED_HOSTS=["state.example"])
    def test_disallowed_host_is_400_json(self):
        self.assertJsonError(self.client.get("/"), 400)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_missing_token_is_401_json(self):
        self.assertJsonError(self.client.get("/"), 401)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_wrong_token_is_401_json(self):
        self.assertJsonError(self.client.get("/", HTTP_X_ESYNC_TOKEN="guess"), 401)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_token_is_required_for_unknown_paths_too(self):
        self.assertJsonError(self.client.get("/nothing"), 401)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_right_token_is_let_through(self):
        response = self.client.post("/init/", urlencode({"num_workers": 1}), content_type=FORM,
                                    HTTP_X_ESYNC_TOKEN="s3cret")

        self.assertEqual(response.status_code, 200)

    def test_unexpected_exception_becomes_json_500_and_is_logged(self):
        self.init(1)
        with mock.patch.object(self.coordinator, "apply", side_effect=RuntimeError("boom")):
            with self.assertLogs("coordinator", "ERROR"), self.assertLogs("django.request"):
                response = self.post("/apply/", r=0, k=1, c=0.1, te=0)

        self.assertJsonError(response, 500)


class ConcurrencyTests(EndpointTestCase):
    def test_parallel_applies_and_resets_leave_consistent_counts(self):
        self.init(4, epsilon=0.01)
        failures = []

        def worker_thread(rank):
            client = Client()
            for step in range(200):
                if step % 4 == 3:
                    response = client.post("/reset/", urlencode({"r": rank, "t": step, "te": 0}),
                                           content_type=FORM)
                else:
                    fields = {"r": rank, "k": step % 4 + 1, "c": 0.01 * (rank + 1), "te": 0}
                    response = client.post("/apply/", urlencode(fields), content_type=FORM)
                if response.status_code != 200:
                    failures.append(response.content)

        threads = [threading.Thread(target=worker_thread, args=(i % 4,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        state = self.client.get("/").json()
        self.assertEqual(failures, [])
        self.assertEqual(state["requests"], {"apply": 1200, "reset": 400, "plan": 0, "arrive": 0, "watch": 0})
        self.assertEqual([w["applies"] for w in state["workers"]], [300] * 4)
        self.assertEqual([w["resets"] for w in state["workers"]], [100] * 4)


# ---------------------------------------------------------------- no input reaches the 500 path

FIELD_NAMES = ["num_workers", "epsilon", "policy", "r", "k", "c", "te", "t"]
ENDPOINTS = ["/init/", "/apply/", "/reset/", "/plan/", "/", "/apply", "/other"]
text_values = st.one_of(
    st.text(max_size=12),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["nan", "-inf", "1e999", "-0", "0x10", " 1 ", "1_0", "\x00", "0", "1"]),
)
form_bodies = st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), text_values,
                              max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6,
)
json_bodies = st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=6) | json_values
fuzz_settings = hypothesis_settings(max_examples=150, derandomize=True, database=None,
                                    deadline=None,
                                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def fresh_coordinator(settings):
    settings.ESYNC_STATE_TOKEN = None
    coordinator = Coordinator()
    with mock.patch.object(views, "COORDINATOR", coordinator):
        yield coordinator


def assert_handled(response):
    assert response.status_code in {200, 400, 404, 405, 409}, response.content
    assert response["Content-Type"] == "application/json"
    assert isinstance(json.loads(response.content), dict)


@fuzz_settings
@given(endpoint=st.sampled_from(ENDPOINTS), body=form_bodies, initialised=st.booleans())
def test_no_form_body_reaches_the_safety_net(fresh_coordinator, endpoint, body, initialised):
    client = Client()
    if initialised:
        fresh_coordinator.init(3)

    assert_handled(client.post(endpoint, urlencode(body), content_type=FORM))


@fuzz_settings
@given(endpoint=st.sampled_from(ENDPOINTS), body=json_bodies)
def test_no_json_body_reaches_the_safety_net(fresh_coordinator, endpoint, body):
    fresh_coordinator.init(3)

    response = Client().post(endpoint, json.dumps(body), content_type="application/json")

    assert_handled(response)


@fuzz_settings
@given(endpoint=st.sampled_from(ENDPOINTS), body=st.binary(max_size=64),
       content_type=st.sampled_from(["application/json", FORM, "multipart/form-data",
                                     "multipart/form-data; boundary=x", "text/plain"]))
def test_no_raw_body_reaches_the_safety_net(fresh_coordinator, endpoint, body, content_type):
    fresh_coordinator.init(3)

    assert_handled(Client().post(endpoint, body, content_type=content_type))


# ---------------------------------------------------------------- the development server


def test_runserver_connections_send_small_answers_without_delay():
    with NoDelayWSGIServer(("127.0.0.1", 0), None) as server:
        with socket.create_connection(server.server_address):
            connection, _ = server.get_request()
            with connection:
                nodelay = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    assert nodelay != 0


def test_state_shows_the_margin_once_all_step_times_are_known():
    coordinator = Coordinator(clock=FakeClock())
    coordinator.init(2)
    coordinator.apply(0, k=1, c=0.5, te=1.0)
    margin_while_unknown = coordinator.snapshot()["margin"]

    coordinator.apply(1, k=1, c=0.2, te=1.0)

    assert margin_while_unknown is None
    assert coordinator.snapshot()["margin"] == pytest.approx(0.05)
