"""The emulated slowdown's rule: each step padded to F x the typical compute time, the set-up step left alone."""
import pytest

from training import heterogeneity
from training.heterogeneity import EmulatedSlowdown


@pytest.fixture
def slept(monkeypatch):
    pauses = []
    monkeypatch.setattr(heterogeneity.time, "sleep", pauses.append)
    return pauses


def test_the_set_up_step_is_neither_padded_nor_taken_as_typical(slept):
    slowdown = EmulatedSlowdown(20)

    first = slowdown.pad(0.6)      # graph set-up while other processes start: 100x a step
    second = slowdown.pad(0.006)

    assert first == 0.0
    assert second == pytest.approx(20 * 0.006 - 0.006)
    assert slept == [pytest.approx(0.114)]


def test_a_step_that_waited_for_a_core_is_padded_to_the_typical_time_not_multiplied(slept):
    slowdown = EmulatedSlowdown(4)
    for compute in (0.05, 0.010, 0.010, 0.010):
        slowdown.pad(compute)

    pause = slowdown.pad(0.030)    # this step met a busy core

    assert pause == pytest.approx(4 * 0.010 - 0.030)


def test_a_step_longer_than_f_typical_steps_sleeps_not_at_all(slept):
    slowdown = EmulatedSlowdown(2)
    for compute in (0.05, 0.010, 0.010):
        slowdown.pad(compute)

    assert slowdown.pad(0.5) == 0.0
