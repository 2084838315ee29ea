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


def test_a_repeat_that_never_reached_is_censored_at_its_training_time_and_a_failed_one_left_out():
    times = significance.censored_times([3.0, None, None], [10.0, 10.5, None])

    assert times == [[3.0, True], [10.5, False]]
    assert significance.reached_note(times) == "1 of 2 reached" and significance.location(times) == 6.75


def test_times_never_reached_are_judged_as_censored_whatever_the_runs_would_have_done():
    leader = [[35.0, True], [40.0, True], [45.0, True]]
    censored = [[75.0, False], [75.1, False], [75.2, False]]
    went_on = [[76.0, True], [150.0, True], [400.0, True]]  # what the censored runs might have done

    # Welch's test on the plugged-in times would say 0.0067 here and 0.23 there
    assert significance.p_value(leader, censored) == pytest.approx(0.0246, abs=5e-4)
    assert significance.p_value(leader, went_on) == pytest.approx(significance.p_value(leader, censored))
    assert significance.leads(leader, censored) and not significance.leads(censored, leader)


def test_repeats_none_of_which_reached_the_target_do_not_differ():
    assert significance.p_value([[30.0, False]] * 3, [[30.0, False]] * 3) == 1.0
