"""The verdict's paired test (analysis/paired.py): runs paired by seed, capped at the budget, a verdict only from
ten pairs, corrected over the study's comparisons, its interval the test inverted."""
import itertools
import json

import numpy as np
import pytest

from analysis import paired

BUDGET = 60.0


def scheme(times):
    """A scheme's numbers as a map stores them: [seconds, reached] per repeat."""
    return {"repeats": len(times), "censored_times": [[t, True] if t is not None else [BUDGET, False] for t in times]}


def cell(**schemes):
    return {"split": "iid", "profile": "1,4", "link": 12.0, "schemes": {name: scheme(t) for name, t in schemes.items()}}


def test_the_p_value_is_the_share_of_sign_flips_of_the_paired_differences_as_extreme_as_seen():
    a, b = np.array([5.0, 7.0, 6.0, 9.0]), np.array([4.0, 4.0, 6.5, 6.0])
    differences = a - b
    seen = abs(differences.mean())
    flips = [abs(np.mean(differences * signs)) for signs in itertools.product((1, -1), repeat=4)]

    assert paired.paired_p(a, b) == pytest.approx(sum(f >= seen - 1e-12 for f in flips) / 16)


def test_ten_pairs_of_one_sign_reach_the_floor_and_five_cannot_reach_five_percent():
    a = np.arange(10, 20, dtype=float)

    assert paired.paired_p(a, a - 1) == pytest.approx(paired.floor(10)) == pytest.approx(2 / 1024)
    assert paired.paired_p(a[:5], a[:5] - 1) == pytest.approx(0.0625)  # above 5 % whatever the data


def test_a_target_reached_after_the_budget_counts_as_a_miss_at_the_budget():
    first, second, first_missed, second_missed = paired.capped_pairs(
        [[10.0, True], [70.0, True], [80.0, False]], [[20.0, True], [30.0, True], None], BUDGET)

    assert list(first) == [10.0, 60.0] and list(second) == [20.0, 30.0]  # the third repeat has no pair
    assert list(first_missed) == [False, True] and not second_missed.any()


def test_ten_pairs_where_the_cluster_is_sooner_in_every_seed_read_yes_and_five_are_exploratory():
    device = [30.0 + i for i in range(10)]
    found = paired.verdicts({0.8: cell(local=device, sync=[t / 2 for t in device])}, BUDGET)[0.8]
    few = paired.verdicts({0.8: cell(local=device[:5], sync=[t / 2 for t in device[:5]])}, BUDGET)[0.8]

    assert found["answer"] == "yes" and found["scheme"] == "sync" and found["ratio"] == pytest.approx(2.0)
    assert found["low"] > 1 and found["bound"] is None
    assert few["answer"] == "exploratory"


def test_the_correction_covers_every_target_unless_the_study_names_a_primary_one():
    device = [30.0 + i for i in range(10)]
    cells = {t: cell(local=device, sync=[d - 1 for d in device], esync=[d - 2 for d in device],
                     async_=[d + 1 for d in device]) for t in (0.8, 0.85, 0.87)}

    everywhere = paired.verdicts(cells, BUDGET)
    primary = paired.verdicts(cells, BUDGET, primary=0.87)

    # 9 comparisons at p = 2/1024: Holm's first threshold 0.05/9 is above it, so they pass; named primary, 3 do
    assert all(v["answer"] == "yes" for v in everywhere.values())
    assert primary[0.87]["answer"] == "yes" and primary[0.8]["answer"] == primary[0.85]["answer"] == "exploratory"
    many = {t: cell(local=device, **{f"s{i}": [d - 1 for d in device] for i in range(10)}) for t in (0.8, 0.85, 0.87)}
    assert paired.verdicts(many, BUDGET)[0.87]["answer"] == "cannot be told"  # 30 comparisons: the floor is too high


def test_misses_make_the_ratio_a_bound_and_misses_on_every_side_leave_no_ratio():
    device = [30.0 + i for i in range(10)]
    lower = paired.verdicts({0.8: cell(local=[None] + device[1:], sync=[t / 2 for t in device])}, BUDGET)[0.8]
    none = paired.verdicts({0.8: cell(local=[None] * 10, sync=[None] * 10)}, BUDGET)[0.8]

    assert lower["bound"] == "lower"
    assert none["ratio"] is None and none["answer"] == "cannot be told"


def test_a_studys_declaration_names_its_primary_target(tmp_path):
    (tmp_path / paired.DECLARATION).write_text(json.dumps({"primary_target": 0.85}))
    (tmp_path / "real").mkdir()

    assert paired.declared_primary(str(tmp_path)) == 0.85
    assert paired.declared_primary(str(tmp_path / "real")) == 0.85  # a study's map in a folder of its own
    assert paired.declared_primary(str(tmp_path / "real" / "elsewhere")) is None


def test_the_leader_wins_only_where_it_leads_every_scheme_paired_beyond_the_spread_from_ten_pairs():
    fast = [10.0 + i for i in range(10)]
    cells = {0.8: cell(esync=fast, sync=[t + 5 for t in fast], local=[t + 1 if i % 2 else t - 1
                                                                       for i, t in enumerate(fast)])}

    found = paired.leader_verdicts(cells, BUDGET)[0.8]
    few = paired.leader_verdicts({0.8: cell(esync=fast[:5], sync=[t + 5 for t in fast[:5]])}, BUDGET)[0.8]

    # esync and local alternate: local is not beaten beyond the spread; sync is, in every pair
    assert found["leader"] == "esync" and found["winner"] is None and found["tied"] == ["esync", "local"]
    assert found["adjusted_p_values"]["sync"] < 0.05
    assert few["winner"] is None and few["tied"] == ["esync", "sync"]  # 5 pairs cannot reach 5 %


def test_the_interval_is_the_test_inverted_its_ends_where_the_paired_test_starts_rejecting():
    rng = np.random.default_rng(3)
    for _ in range(6):
        a, b = rng.uniform(10, 60, 10).round(1), rng.uniform(10, 60, 10).round(1)
        ratio, low, high = paired.ratio_interval(a, b)

        assert low < ratio < high
        assert paired.paired_p(a, b * low) >= paired.ALPHA > paired.paired_p(a, b * low * 0.999)
        assert paired.paired_p(a, b * high) >= paired.ALPHA > paired.paired_p(a, b * high * 1.001)
        assert (low > 1 or high < 1) == (paired.paired_p(a, b) < paired.ALPHA)  # it excludes 1 where the test rejects
    assert paired.ratio_interval(a[:5], b[:5])[1:] == (None, None)  # 5 pairs: no ratio is ever rejected


def test_times_a_microsecond_apart_are_a_tie_and_equal_times_that_reached_have_a_ratio():
    device = [100 * (0.1 + 0.2)] * 10  # 30.000000000000004
    tied = paired.verdicts({0.8: cell(local=device, sync=[30.0] * 10)}, BUDGET)[0.8]
    same = paired.verdicts({0.8: cell(local=[30.0] * 10, sync=[30.0] * 10)}, BUDGET)[0.8]

    assert tied["answer"] == "cannot be told" and tied["p_values"] == {"sync": 1.0}
    assert same["ratio"] == 1.0 and same["bound"] is None


def test_the_floor_counts_the_pairs_that_differ_not_those_that_both_missed():
    device = [30.0 + i for i in range(4)] + [None] * 6
    found = paired.verdicts({0.8: cell(local=device, sync=[t and t / 2 for t in device])}, BUDGET)[0.8]

    assert found["pairs"] == 10 and found["floor"] == paired.floor(4) == 0.125
    assert found["answer"] == "cannot be told"


def test_a_scheme_with_a_failed_run_stays_in_the_race_on_the_seeds_it_ran():
    device = [30.0 + i for i in range(11)]
    runs = cell(local=device, esync=[t / 3 for t in device], sync=[t + 5 for t in device])
    runs["schemes"]["esync"]["times_by_repeat"] = [None] + runs["schemes"]["esync"]["censored_times"][1:]
    runs["schemes"]["esync"]["censored_times"] = runs["schemes"]["esync"]["censored_times"][1:]  # as a map stores it

    found = paired.verdicts({0.8: runs}, BUDGET)[0.8]

    assert found["answer"] == "yes" and found["scheme"] == "esync" and found["pairs"] == 10
    assert set(found["adjusted_p_values"]) == {"esync", "sync"}


def test_a_cell_whose_repeats_cannot_be_aligned_gets_no_verdict_and_counts_in_the_correction():
    device = [30.0 + i for i in range(10)]
    aligned = cell(local=device, sync=[t / 2 for t in device])
    unaligned = cell(local=device, sync=[t / 2 for t in device[1:]])  # a failed run, no times_by_repeat
    unaligned["schemes"]["sync"]["repeats"] = 10

    found = paired.study_verdicts({"a": {0.8: aligned}, "b": {0.8: unaligned}}, BUDGET)

    assert "b" not in found and found["a"][0.8]["adjusted_p_values"]["sync"] == pytest.approx(2 * 2 / 1024)
    assert paired.unpaired({"cluster_pays": "yes"})["cluster_pays"] == "exploratory"  # what the docs then show


def test_the_correction_covers_every_cell_of_the_study():
    device = [30.0 + i for i in range(10)]
    one_cell = {0.8: cell(local=device, **{f"s{i}": [d - 1 for d in device] for i in range(10)})}

    alone = paired.study_verdicts({"R12": one_cell}, BUDGET)
    three = paired.study_verdicts({link: one_cell for link in ("free", "R12", "R100")}, BUDGET)

    assert alone["R12"][0.8]["answer"] == "yes"  # 10 comparisons at 2/1024: Holm's 0.05/10 is above it
    assert three["R12"][0.8]["answer"] == "cannot be told"  # 30 at 2/1024: 0.05/30 is below it


def test_a_map_written_after_its_runs_carries_the_paired_answers_at_every_target():
    device = [30.0 + i for i in range(10)]
    first, higher = cell(local=device, sync=[t / 2 for t in device]), cell(local=device, sync=[t * 2 for t in device])
    stored = {**first, "cluster_pays": "cannot be told", "leader": "local", "winner": None, "tied": ["local", "sync"],
              "at_higher_targets": {"0.85": {"schemes": higher["schemes"], "cluster_pays": "cannot be told"}}}

    judged = paired.judged_map({"target": 0.8, "targets": [0.8, 0.85], "max_time": BUDGET, "cells": [stored]})

    now = judged["cells"][0]
    assert now["cluster_pays"] == "yes" and now["leader"] == now["winner"] == "sync"
    assert now["at_higher_targets"]["0.85"]["cluster_pays"] == "no"
    assert now["at_higher_targets"]["0.85"]["winner"] == "local" and judged["test_name"] == paired.TEST_NAME


def test_the_detectable_ratio_follows_the_spread_of_the_pairs_log_ratios():
    rng = np.random.default_rng(5)
    device = rng.uniform(20, 60, 10)
    tight, loose = device / 1.5 * rng.uniform(0.98, 1.02, 10), device / 1.5 * rng.uniform(0.6, 1.6, 10)

    assert 1 < paired.detectable_ratio(device, tight) < paired.detectable_ratio(device, loose)
    assert paired.detectable_ratio(device[:5], tight[:5]) is None  # 5 pairs never reach 5 %
