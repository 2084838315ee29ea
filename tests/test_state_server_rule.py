"""Tests of the ESync state server's readiness rule and plan, and the adaptive policy's round sizes."""

import math

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from coordination.records import MAX_PLANNED_STEPS, Settings, WorkerRecord, is_ready, margin, planned_steps, \
    slowest_worker
from coordination.rules.adaptive import (CAPPED, COVERS_AGGREGATION, FIRST_ROUND, ONE_STEP, RoundPlan, adaptive_plan,
                                         slowest_steps)

pytestmark = pytest.mark.usefixtures("quiet_coordinator_console")  # tests/conftest.py


def worker(rank, c, k=1, t=0, ready=False, step_start=0.0, a=None):
    return WorkerRecord(rank=rank, step_start=step_start, c=c, k=k, t=t, ready=ready, a=a)


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
