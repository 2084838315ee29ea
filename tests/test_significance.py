"""The rule that names a winner only where its lead holds beyond the repeats' spread (analysis/significance.py)."""
import pytest

from analysis import significance


def test_a_lead_far_beyond_the_spread_holds_and_one_within_it_does_not():
    assert significance.leads([10.0, 11.0, 12.0], [20.0, 21.0, 22.0])
    assert not significance.leads([10.0, 14.0, 12.0], [11.0, 15.0, 13.0])
    assert not significance.leads([20.0, 21.0, 22.0], [10.0, 11.0, 12.0])  # slower is never a lead


def test_the_p_value_is_welchs():
    # Welch's t = (2 - 5) / sqrt(1/3 + 1/3) = -3.674, df = 4: two-sided p = 0.0213
    assert significance.p_value([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(0.0213, abs=5e-4)


def test_one_repeat_has_no_spread_to_judge_by():
    assert significance.p_value([1.0], [9.0, 9.5]) == 1.0
    assert not significance.leads([1.0], [9.0, 9.5])


def test_repeats_that_do_not_vary_differ_exactly_when_their_means_do():
    assert significance.p_value([5.0, 5.0], [7.0, 7.0]) == 0.0
    assert significance.p_value([5.0, 5.0], [5.0, 5.0]) == 1.0


def test_the_verdict_names_a_winner_or_the_schemes_that_tie_with_the_leader():
    times = {"esync": [3.0, 3.2, 3.1], "async": [3.1, 3.5, 2.9], "sync": [9.0, 9.5, 9.2]}

    tied = significance.verdict("esync", times)
    alone = significance.verdict("esync", {"esync": times["esync"], "sync": times["sync"]})

    assert (tied["winner"], tied["tied"]) == (None, ["esync", "async"])
    assert (alone["winner"], alone["tied"]) == ("esync", ["esync"])
    assert alone["p_values"]["sync"] < significance.ALPHA


def test_a_repeat_that_never_reached_counts_with_its_training_time_and_a_failed_one_not_at_all():
    assert significance.censored_times([3.0, None, None], [10.0, 10.5, None]) == [3.0, 10.5]
