"""Does the cluster pay? The verdict's test: the schemes' runs paired by seed, each capped at the map's budget.

Every scheme of a map runs on the same seeds (repeat r on seed + r - 1: the same data order and initial weights), so
the device alone and a cluster scheme on one seed are a pair.

| step | how |
|---|---|
| a run's time | its time to the target, capped at the budget: reached after the budget, or never, it counts as the budget |
| the test | the mean of the paired differences against every flip of their signs (scipy.stats.permutation_test, permutation_type="samples": exact, 2^n flips), two-sided; Holm-corrected over every comparison the study names (each cluster scheme against the device alone, in every cell, at every target, or at its primary target) |
| the ratio | the device's mean capped time over the scheme's; its 95 % interval the same test inverted: the ratios rho at which the mean of device - rho x scheme is not rejected |
| a bound | where one side's capped times include a miss its mean is a lower bound: the ratio is `≥` where the device's do, `≤` where the scheme's do, and bounded neither way where both do (said so); no ratio where neither side reached the target |
| the answer | "yes" where a cluster scheme is sooner, "no" where the device is sooner than every one, only from MIN_PAIRS or more pairs, after correction and with an interval that excludes 1; "cannot be told" otherwise; "exploratory" under MIN_PAIRS pairs |

Times closer than a microsecond (the logs' resolution) are a tie. A map whose runs all ended well pairs its repeats by
their order; one where a run failed pairs the repeats both schemes finished (`times_by_repeat`); a cell whose repeats
cannot be aligned (a map from before `times_by_repeat`, with a failed run) gets no verdict, and its comparisons count
in the correction at p = 1.
"""
import math
import os
import statistics

import numpy as np
from scipy import stats

from analysis import scheme_names, significance
from training.files import read_json

STANDALONE = "local"
DECLARATION = "declared.json"  # launcher/studies/registry.py's: a study's declaration beside its results
ALPHA = significance.ALPHA
MIN_PAIRS = 10
EXACT_UP_TO = 20            # pairs: up to 2^20 sign flips enumerated
TIME_DECIMALS = 6           # the logs' resolution: times closer than a microsecond are a tie
TEST_NAME = ("an exact paired permutation test of the mean capped time to target at 5 % (the runs paired by seed, a "
             "target missed within the budget counted at the budget), Holm-corrected over the study's comparisons")


def by_repeat(numbers):
    """A scheme's [[seconds, reached] or None] by repeat, or None where its repeats cannot be aligned."""
    if numbers.get("times_by_repeat") is not None:
        return numbers["times_by_repeat"]
    times = numbers.get("censored_times") or []
    return times if len(times) == numbers.get("repeats") else None


def capped(time, budget):
    """(seconds, missed) of one run's [seconds, reached]: reached after the budget, or never, it counts as the budget."""
    seconds, reached = time
    return (seconds, False) if reached and seconds <= budget else (float(budget), True)


def capped_seconds(times, budget):
    """The capped seconds of a scheme's runs that ran."""
    return np.array([capped(time, budget)[0] for time in times if time is not None], dtype=float)


def capped_pairs(first, second, budget):
    """(first's, second's capped seconds, first's misses, second's: arrays) over the repeats both have."""
    both = [(capped(a, budget), capped(b, budget)) for a, b in zip(first, second) if a is not None and b is not None]
    a, b = ([pair[i] for pair in both] for i in (0, 1))
    return (np.round(np.array([s for s, _ in a], dtype=float), TIME_DECIMALS),
            np.round(np.array([s for s, _ in b], dtype=float), TIME_DECIMALS),
            np.array([m for _, m in a], dtype=bool), np.array([m for _, m in b], dtype=bool))


def paired_p(a, b):
    """The two-sided p-value of the mean paired difference under sign flips (1.0 under two pairs or no difference)."""
    if len(a) < 2 or np.all(a == b):
        return 1.0
    exact = len(a) <= EXACT_UP_TO
    found = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
                                   permutation_type="samples", alternative="two-sided",
                                   n_resamples=2 ** len(a) if exact else 100_000, rng=np.random.default_rng(0))
    return float(found.pvalue)


def floor(pairs):
    """The smallest p-value `pairs` differing pairs allow: every difference of one sign."""
    return 1.0 if pairs < 2 else min(1.0, 2.0 / 2 ** pairs)


def ratio_interval(a, b):
    """(mean a / mean b, low, high): the ratio of mean capped times and the ratios rho the paired test does not reject
    at ALPHA (the mean of a - rho x b against the flips of its signs): the test's own interval, inverted. low or high
    None where no ratio that way is rejected (too few differing pairs: the test's floor is above ALPHA)."""
    ratio = float(np.mean(a) / np.mean(b))
    return ratio, edge(a, b, ratio, 0.8), edge(a, b, ratio, 1.25)


def edge(a, b, ratio, step):
    """The last ratio the test does not reject going from `ratio` by factors of `step`, bisected to 1e-6; None where
    it rejects none."""
    inside, outside = ratio, None
    for _ in range(100):
        if paired_p(a, b * inside * step) < ALPHA:
            outside = inside * step
            break
        inside *= step
    if outside is None:
        return None
    while abs(math.log(outside / inside)) > 1e-6:
        middle = math.sqrt(inside * outside)
        inside, outside = (inside, middle) if paired_p(a, b * middle) < ALPHA else (middle, outside)
    return float(inside)


def detectable_ratio(a, b):
    """The ratio of times `a` and `b`'s pairs detect with POWER at ALPHA (a normal approximation on the spread of their
    log ratios); None where the exact test cannot reach ALPHA at all."""
    if floor(len(a)) >= ALPHA:
        return None
    normal = statistics.NormalDist()
    spread = float(np.std(np.log(a) - np.log(b), ddof=1))
    return math.exp((normal.inv_cdf(1 - ALPHA / 2) + normal.inv_cdf(significance.POWER)) * spread / math.sqrt(len(a)))


def bound_of(device_missed, scheme_missed):
    return {(True, False): "lower", (False, True): "upper", (True, True): "both"}.get((device_missed, scheme_missed))


def verdicts(cells_by_target, budget, primary=None):
    """{target: {answer, scheme, ratio, low, high, bound, pairs, p_values, adjusted_p_values, ...}} of one cell timed
    to several targets ({target: cell}): study_verdicts of a study of that one cell."""
    return study_verdicts({None: cells_by_target}, budget, primary).get(None, {})


def study_verdicts(groups, budget, primary=None):
    """{cell: {target: verdict}} of a study's cells ({cell: {target: cell's numbers}}), the device alone against each
    cluster scheme, Holm over every comparison of every cell, or over the `primary` target's alone where the study
    declared one (the others then exploratory); a cell without the device alone, or whose repeats cannot be aligned,
    has none."""
    compared, unaligned = {}, []
    for group, cells in groups.items():
        for target, cell in cells.items():
            alone = cell["schemes"].get(STANDALONE)
            mine = by_repeat(alone) if alone else None
            theirs = {scheme: by_repeat(numbers) for scheme, numbers in cell["schemes"].items() if scheme != STANDALONE}
            if mine is None or any(times is None for times in theirs.values()):
                unaligned += [(group, target, scheme) for scheme in theirs] if alone else []
                continue
            for scheme, times in theirs.items():
                compared[group, target, scheme] = capped_pairs(mine, times, budget)
    p_values = {key: paired_p(a, b) for key, (a, b, _, _) in compared.items()}
    adjusted = corrected({**p_values, **dict.fromkeys(unaligned, 1.0)}, primary)
    found = {}
    for group, cells in groups.items():
        for target in cells:
            keys = [key for key in compared if key[:2] == (group, target) and len(compared[key][0])]
            if keys:
                found.setdefault(group, {})[target] = judged(keys, compared, p_values, adjusted)
                if primary is not None and target != primary:
                    found[group][target]["answer"] = "exploratory"  # a target the study did not name primary
    return found


def corrected(p_values, primary):
    """Holm-adjusted p-values of {(cell, target, scheme): p}: the family every comparison, or the primary target's
    (the others 1)."""
    family = {key: p for key, p in p_values.items() if primary is None or key[1] == primary}
    return {**dict.fromkeys(p_values, 1.0), **significance.holm(family)}


def judged(keys, compared, p_values, adjusted):
    """The answer at one cell and target from its comparisons."""
    best = min(keys, key=lambda key: np.mean(compared[key][1]))
    a, b, device_missed, scheme_missed = compared[best]
    everyone_missed = bool(device_missed.all() and scheme_missed.all())  # no ratio where neither side reached
    ratio, low, high = (None, None, None) if everyone_missed else ratio_interval(a, b)
    pairs = min(len(compared[key][0]) for key in keys)
    sooner = [key for key in keys if adjusted[key] < ALPHA and np.mean(compared[key][1]) < np.mean(compared[key][0])]
    later = [key for key in keys if adjusted[key] < ALPHA and np.mean(compared[key][1]) > np.mean(compared[key][0])]
    if pairs < MIN_PAIRS:
        answer = "exploratory"
    elif best in sooner and low is not None and low > 1:
        answer = "yes"
    elif len(later) == len(keys) and high is not None and high < 1:
        answer = "no"
    else:
        answer = "cannot be told"
    return {"answer": answer, "scheme": best[2], "ratio": ratio, "low": low, "high": high,
            "bound": bound_of(device_missed.any(), scheme_missed.any()), "pairs": pairs,
            "floor": floor(int(np.count_nonzero(a != b))), "detectable_ratio": detectable_ratio(a, b),
            "sooner": [key[2] for key in sooner], "later": [key[2] for key in later],
            "p_values": {key[2]: p_values[key] for key in keys},
            "adjusted_p_values": {key[2]: adjusted[key] for key in keys}}


def judged_cells(folder, result, timed_cells):
    """(target, cell) of `timed_cells` [(target, cell)] of the map in `folder`, in their order, each cell's answer,
    ratio and test (cluster_pays, one_device_over_best, cluster_pays_test, test) and its leader and ties (leader,
    winner, tied, adjusted_p_values) those of the paired tests, where they apply; the primary target the study's
    declaration names, if it names one."""
    timed_cells = list(timed_cells)
    judgement = judged_groups(folder, result, timed_cells)
    for target, cell in timed_cells:
        yield target, with_verdict(cell, target, judgement)


JUDGED = {}  # judged_groups' results by map folder and the time its results were written


def judged_groups(folder, result, timed_cells):
    """judge() of a map's cells, computed once per map as committed (the docs ask for a map's cells in several
    tables)."""
    from analysis.regime_map import RESULTS_FILE

    path = os.path.join(folder, RESULTS_FILE)
    key = (os.path.abspath(folder), os.stat(path).st_mtime_ns if os.path.exists(path) else None)
    if key[1] is None or key not in JUDGED:
        JUDGED[key] = judge(timed_cells, result["max_time"], declared_primary(folder))
    return JUDGED[key]


def judge(timed_cells, budget, primary=None):
    """({cell: {target: verdict}}, {cell: {target: leader verdict}}) of a map's [(target, cell)], one study: its
    cells keyed by split, profile and link."""
    groups = {}
    for target, cell in timed_cells:
        groups.setdefault(cell_key(cell), {})[target] = cell
    return study_verdicts(groups, budget, primary), study_leader_verdicts(groups, budget, primary)


def cell_key(cell):
    return cell["split"], cell["profile"], cell["link"]


def with_verdict(cell, target, judgement):
    """`cell` at `target` with verdict_of()'s fields over its own."""
    return {**cell, **verdict_of(cell, target, judgement)}


def verdict_of(cell, target, judgement):
    """judge()'s answer, ratio and test of `cell` at `target` (no verdict where it could not pair the cell), and its
    leader and ties: the fields that replace the cell's own."""
    found, leaders = judgement
    verdict = found.get(cell_key(cell), {}).get(target)
    leader = leaders.get(cell_key(cell), {}).get(target, {})
    return {**(overlaid(cell, verdict) if verdict else unpaired(cell)), **leader}


def judged_map(result, primary=None):
    """The map `result` (analysis.regime_map's) with every cell's answer, ratio and test, and its leader and ties,
    those of the paired tests over the whole map, at its target and each higher one: what its own regimes.json and
    regimes.md then say is what the docs' tables say."""
    from analysis.regime_map import cells_at_targets

    judgement = judge(cells_at_targets(result), result["max_time"], primary)
    cells = []
    for cell in result["cells"]:
        higher = {}
        for target, numbers in cell["at_higher_targets"].items():
            higher[target] = {**numbers, **verdict_of({**cell, **numbers}, float(target), judgement)}
        cells.append({**with_verdict(cell, result["target"], judgement), "at_higher_targets": higher})
    return {**result, "cells": cells, "test_name": TEST_NAME}


def leader_verdicts(cells_by_target, budget, primary=None):
    """{target: {leader, winner, tied, p_values, adjusted_p_values}} of one cell: study_leader_verdicts of a study of
    that one cell."""
    return study_leader_verdicts({None: cells_by_target}, budget, primary).get(None, {})


def study_leader_verdicts(groups, budget, primary=None):
    """{cell: {target: {leader, winner, tied, p_values, adjusted_p_values}}}: in each cell and target the scheme of
    the lowest mean capped time against each other one, paired, Holm over every comparison of the study (or the
    primary target's); it wins where it leads each beyond the spread from MIN_PAIRS pairs or more, else `tied` lists
    it with those it does not lead."""
    compared, leaders = {}, {}
    for group, cells in groups.items():
        for target, cell in cells.items():
            aligned = {scheme: by_repeat(numbers) for scheme, numbers in cell["schemes"].items()}
            aligned = {scheme: times for scheme, times in aligned.items() if times}
            if not aligned:
                continue
            means = {scheme: np.mean(capped_seconds(times, budget)) for scheme, times in aligned.items()}
            leader = leaders[group, target] = min(means, key=means.get)
            for scheme in aligned:
                if scheme != leader:
                    compared[group, target, scheme] = capped_pairs(aligned[leader], aligned[scheme], budget)
    p_values = {key: paired_p(a, b) for key, (a, b, _, _) in compared.items()}
    adjusted = corrected(p_values, primary)
    found = {}
    for (group, target), leader in leaders.items():
        keys = [key for key in compared if key[:2] == (group, target)]
        beaten = [key[2] for key in keys if adjusted[key] < ALPHA
                  and np.mean(compared[key][0]) < np.mean(compared[key][1])]
        pairs = min((len(compared[key][0]) for key in keys), default=0)
        tied = [leader] + [key[2] for key in keys if key[2] not in beaten]
        found.setdefault(group, {})[target] = {
            "leader": leader, "winner": leader if len(tied) == 1 and pairs >= MIN_PAIRS else None, "tied": tied,
            "p_values": {key[2]: p_values[key] for key in keys},
            "adjusted_p_values": {key[2]: adjusted[key] for key in keys}}
    return found


def declared_primary(folder):
    """The primary target of the study declared in `folder` (or the folder above it), None where none is named."""
    for path in (os.path.join(folder, DECLARATION), os.path.join(os.path.dirname(folder), DECLARATION)):
        if os.path.isfile(path):
            primary = read_json(path).get("primary_target")
            return None if primary is None else float(primary)
    return None


def unpaired(cell):
    """A cell the paired test could not judge (no device alone, or repeats that cannot be aligned): no verdict."""
    return {"cluster_pays": "exploratory" if cell.get("cluster_pays") in VERDICTS else cell.get("cluster_pays")}


def overlaid(cell, judged):
    adjusted = judged["adjusted_p_values"]
    ratio = {key: judged[key] for key in ("scheme", "ratio", "low", "high", "bound")}
    return {"cluster_pays": judged["answer"], "one_device_over_best": ratio if judged["ratio"] else None,
            "cluster_pays_test": {"faster": judged["sooner"], "slower": judged["later"], "p_values": judged["p_values"],
                                  "adjusted_p_values": adjusted, "pairs": judged["pairs"]},
            "test": {**(cell.get("test") or {}), "repeats": judged["pairs"], "floor": judged["floor"],
                     "detectable_ratio": judged["detectable_ratio"], "name": TEST_NAME}}


# ----------------------------------------------------------------------------------------------
# The verdict in a few sentences, from the same cells as the README's verdict table (doc_tables.answers_of)

VERDICTS = ("yes", "no", "cannot be told")
PAPERS_CLUSTER = "6 devices 1,1,1,1,117,117"


def sentences(answers, links, earlier_model):
    """At most five sentences about `answers` ({(cluster, target): {link: cell}}); `earlier_model(cell)` marks a cell
    charged an earlier link model."""
    cells = [(cluster, target, link, found[link]) for (cluster, target), found in answers.items()
             for link in links if link in found]
    judged = [entry for entry in cells if entry[3].get("cluster_pays") in VERDICTS]
    free = [entry for entry in judged if entry[2] == "loopback"]
    costly = [entry for entry in judged if entry[2] != "loopback"]
    said = [f"{len(judged)} of the {len(cells)} cells and targets above carry a verdict (10 or more paired repeats); "
            f"the other {len(cells) - len(judged)} are exploratory."]
    if free:
        said.append(f"On free links {counted(free)}{sooner(free)}.")
    if costly:
        said.append(f"Where a transfer of the model costs fast steps (R > 0) {counted(costly)}{sooner(costly)}.")
    papers = [entry for entry in judged if entry[0][1] == PAPERS_CLUSTER and "i.i.d." in entry[0][2].split(",")[0]
              and entry[2] != "loopback"]
    if papers:
        cluster, target, link, cell = max(papers, key=lambda entry: (entry[2], float(entry[1])))
        said.append(f"On the paper's cluster at R = {link:g}, to {target}: {cell['cluster_pays']}"
                    f"{ratio_said(cell)}.")
    marked = [entry for entry in judged if earlier_model(entry[3])]
    if marked:
        said.append(f"{len(marked)} of the verdicts were charged an earlier link model of the virtual clock (marked).")
    return " ".join(said) + "\n"


def counted(entries):
    answers = [entry[3]["cluster_pays"] for entry in entries]
    return "the cells read " + ", ".join(f"{word} in {answers.count(word)}" for word in VERDICTS
                                         if answers.count(word))


def sooner(entries):
    schemes = sorted({scheme_names.display(entry[3]["one_device_over_best"]["scheme"]) for entry in entries
                      if entry[3]["cluster_pays"] == "yes" and entry[3].get("one_device_over_best")})
    return f" (sooner than one device: {', '.join(schemes)})" if schemes else ""


def ratio_said(cell):
    found = cell.get("one_device_over_best")
    if not found:
        return ""
    return (f", one device's mean time over {scheme_names.display(found['scheme'])}'s {found['ratio']:.2f} "
            f"({interval_text(found)})")


def interval_text(found):
    """`low–high` of a ratio's interval, an open end where the test rejects no ratio that way."""
    low, high = found.get("low"), found.get("high")
    return f"{'0' if low is None else f'{low:.2f}'}–{'∞' if high is None else f'{high:.2f}'}"
