"""Tests of the ESync state server's Coordinator with an injected clock: rounds, resets, resumed jobs, threads."""

import threading

import pytest

from coordination.records import FieldError
from coordination.state import Coordinator, NotInitialised
from tests.state_server_helpers import FakeClock

pytestmark = pytest.mark.usefixtures("quiet_coordinator_console")  # tests/conftest.py


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


def test_state_shows_the_margin_once_all_step_times_are_known():
    coordinator = Coordinator(clock=FakeClock())
    coordinator.init(2)
    coordinator.apply(0, k=1, c=0.5, te=1.0)
    margin_while_unknown = coordinator.snapshot()["margin"]

    coordinator.apply(1, k=1, c=0.2, te=1.0)

    assert margin_while_unknown is None
    assert coordinator.snapshot()["margin"] == pytest.approx(0.05)
