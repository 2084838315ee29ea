"""The rule that names a winner only where its lead holds beyond the repeats' spread (analysis/significance.py): an
exact permutation test, Holm's correction for the choice of the leader."""
import itertools
import math

import numpy as np
import pytest

from analysis import significance


def hand_count(first, second):
    """The permutation p-value counted split by split, with no numpy: the reference the test is checked against."""
    pooled = first + second
    observed = abs(sum(first) / len(first) - sum(second) / len(second))
    splits = list(itertools.combinations(range(len(pooled)), len(first)))
    hits = 0
    for chosen in splits:
        a = [pooled[i] for i in chosen]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += abs(sum(a) / len(a) - sum(b) / len(b)) >= observed - 1e-9
    return hits / len(splits)


def test_three_against_three_perfectly_separated_cannot_go_below_a_tenth():
    p = significance.p_value([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])

    assert p == pytest.approx(2 / 20) == pytest.approx(hand_count([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]))
    assert p >= 0.10 and significance.floor(3, 3) == pytest.approx(0.10)
    assert not significance.leads([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])  # no lead can be named at three repeats


def test_ten_against_ten_perfectly_separated_reach_two_of_every_split():
    first, second = [float(i) for i in range(10)], [float(i) for i in range(10, 20)]

    assert math.comb(20, 10) == 184_756
    assert significance.p_value(first, second) == pytest.approx(2 / 184_756)
    assert significance.floor(10, 10) == pytest.approx(1.08e-5, rel=1e-2) and significance.floor(5, 5) == \
        pytest.approx(2 / 252)


def test_the_p_value_is_the_share_of_splits_counted_by_hand():
    first, second = [3.1, 4.0, 2.2, 5.0, 3.3], [4.4, 6.0, 3.9, 5.5, 7.1]

    assert significance.p_value(first, second) == pytest.approx(hand_count(first, second))


def test_beyond_the_exact_limit_the_splits_are_drawn_and_the_p_value_never_zero(monkeypatch):
    monkeypatch.setattr(significance, "EXACT_SPLITS", 100)
    monkeypatch.setattr(significance, "MONTE_CARLO_SPLITS", 2000)
    first, second = [float(i) for i in range(8)], [float(i) for i in range(8, 16)]

    p = significance.p_value(first, second)

    assert 0 < p <= 3 / 2001 and p == significance.p_value(first, second)  # seeded: the same draws each time


def test_a_lead_far_beyond_the_spread_holds_at_five_repeats_and_one_within_it_does_not():
    assert significance.leads([10.0, 11.0, 12.0, 10.5, 11.5], [20.0, 21.0, 22.0, 20.5, 21.5])
    assert not significance.leads([10.0, 14.0, 12.0, 11.0, 13.0], [11.0, 15.0, 13.0, 12.0, 14.0])
    assert not significance.leads([20.0, 21.0, 22.0, 20.5, 21.5], [10.0, 11.0, 12.0, 10.5, 11.5])  # slower


def test_one_repeat_has_no_spread_to_judge_by():
    assert significance.p_value([1.0], [9.0, 9.5]) == 1.0
    assert not significance.leads([1.0], [9.0, 9.5])


def test_a_leader_chosen_among_several_is_corrected_for_the_choice():
    leader = [10.0, 11.0, 12.0, 10.5, 11.5, 10.2]
    close = {name: [v + shift for v in leader] for name, shift in (("a", 1.1), ("b", 1.2), ("c", 1.3))}

    raw = {name: significance.p_value(leader, sample) for name, sample in close.items()}
    found = significance.verdict("esync", {"esync": leader, **close})

    assert all(p < significance.ALPHA for p in raw.values())  # each alone would be called a lead
    assert found["winner"] is None and found["tied"][0] == "esync" and len(found["tied"]) > 1
    assert found["adjusted_p_values"] == significance.holm(raw)


def test_holms_adjustment_steps_down_and_never_decreases():
    adjusted = significance.holm({"a": 0.01, "b": 0.04, "c": 0.03})

    assert adjusted == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})


def test_the_verdict_names_a_winner_or_the_schemes_that_tie_with_the_leader():
    times = {"esync": [3.0, 3.2, 3.1, 3.3, 2.9], "async": [3.1, 3.5, 2.9, 3.0, 3.4],
             "sync": [9.0, 9.5, 9.2, 9.1, 9.4]}

    tied = significance.verdict("esync", times)
    alone = significance.verdict("esync", {"esync": times["esync"], "sync": times["sync"]})

    assert (tied["winner"], tied["tied"]) == (None, ["esync", "async"])
    assert (alone["winner"], alone["tied"]) == ("esync", ["esync"])
    assert alone["p_values"]["sync"] == pytest.approx(2 / 252)


def test_a_miss_counts_at_the_budget_and_a_failed_repeat_is_left_out():
    times = significance.censored_times([3.0, None, None, None], [10.0, 10.5, 2.0, None], budget=12.0)

    assert times == [[3.0, True], [12.0, False], [12.0, False]]  # the run that stopped at 2 s diverged: a miss
    assert significance.reached_note(times) == "1 of 3 reached"


def test_times_never_reached_are_judged_the_same_whatever_the_runs_would_have_done():
    leader = [[35.0, True], [40.0, True], [45.0, True], [38.0, True], [42.0, True]]
    censored = [[75.0, False], [75.1, False], [75.2, False], [75.0, False], [75.0, False]]
    went_on = [[76.0, True], [150.0, True], [400.0, True], [90.0, True], [80.0, True]]  # what they might have done

    assert significance.p_value(leader, censored) == pytest.approx(2 / 252)
    assert significance.leads(leader, censored) and not significance.leads(censored, leader)
    assert significance.leads(leader, went_on)


def test_repeats_none_of_which_reached_the_target_do_not_differ():
    assert significance.p_value([[30.0, False]] * 3, [[30.0, False]] * 3) == 1.0


def test_three_repeats_detect_no_ratio_and_ten_detect_a_smaller_one_than_five():
    assert significance.detectable_ratio(3, 0.7) is None  # the test cannot reach 5 % at all
    assert 1 < significance.detectable_ratio(10, 0.7) < significance.detectable_ratio(5, 0.7)
    assert significance.pooled_log_spread([[1.0, math.e], [2.0]]) == pytest.approx(1 / math.sqrt(2))


def test_the_ratio_of_medians_comes_with_a_bootstrap_interval_and_says_where_a_miss_makes_it_a_bound():
    slow = [[t, True] for t in (20.0, 22.0, 21.0, 19.0, 23.0)]
    fast = [[t, True] for t in (10.0, 11.0, 10.5, 9.5, 12.0)]

    found = significance.ratio_interval(slow, fast)
    assert found["ratio"] == 21.0 / 10.5 and found["low"] > 1.0 and found["low"] <= found["ratio"] <= found["high"]
    assert found["bound"] is None and significance.ratio_interval(slow, fast) == found  # a fixed seed
    assert significance.ratio_interval(fast, fast)["ratio"] == 1.0
    missed = significance.ratio_interval([[30.0, False]] + slow[1:], fast)
    assert missed["bound"] == "lower"
    assert significance.ratio_interval(fast, [[30.0, False]] + slow[1:])["bound"] == "upper"
    assert significance.ratio_interval(slow[:1], fast) is None
    never = [[30.0, False]] * 5
    assert significance.ratio_interval(never, never) is None  # two misses have no ratio
    assert significance.ratio_interval(never, fast)["bound"] == "lower"


def test_the_enumerated_test_gives_scipys_exact_p_values_for_samples_of_one_size():
    from scipy import stats

    rng = np.random.default_rng(7)
    for sizes in ((5, 5), (6, 6), (3, 3)):
        first, second = rng.uniform(10, 60, sizes[0]), rng.uniform(10, 60, sizes[1])
        scipys = stats.permutation_test((first, second), lambda x, y, axis: x.mean(axis=axis) - y.mean(axis=axis),
                                        vectorized=True, permutation_type="independent", n_resamples=np.inf)

        assert significance.permutation_p(list(first), list(second)) == pytest.approx(scipys.pvalue, abs=1e-12)
