"""Whether one scheme's lead over another holds beyond the spread of their repeats: an exact permutation test,
two-sided, at 5 %.

Every comparison is one test: the difference of the two samples' means, against its distribution over every way
of splitting the pooled values into two groups of the same sizes (all of them up to EXACT_SPLITS, else
MONTE_CARLO_SPLITS drawn with a fixed seed). Its p-value is one the repeats can reach: three against three cannot go
below 2 / C(6, 3) = 0.10, five against five below 0.0079, ten against ten below 1.1e-5 (floor()).

Times to a target are the restricted mean time to target: a repeat that never reached it (it ran out of time,
diverged or was stopped) counts at the horizon, the longest time any repeat of the two samples ran, as a budget
that was used up; a run that diverged after 3 s is a miss, not a fast run. A repeat's time is a pair
[seconds, reached] (censored_times). Other numbers (accuracies, throughputs) enter as they are.

Choosing the best of several schemes and then testing it is corrected for the choice: verdict() adjusts the
leader's p-values against the others by Holm's step-down method, and a scheme with fewer than MIN_REPEATS values is
never called faster or slower than another.

The splits are enumerated here, once per pair of sizes (every_split), rather than by scipy.stats.permutation_test
(permutation_type="independent"), which gives the same p-values for samples of one size (of two sizes it doubles
the smaller one-sided p-value; this test counts the splits at least as far from zero): ten against ten took it 2.2 s
a test on this machine, this enumeration 0.01 s once cached, and the docs' tables make hundreds of such tests. The
verdict's own test, paired by seed, is SciPy's (analysis/paired.py).
"""
import functools
import itertools
import math
import statistics

ALPHA = 0.05
MIN_REPEATS = 2
EXACT_SPLITS = 200_000      # up to this many splits the test enumerates them all (10 against 10: 184,756)
MONTE_CARLO_SPLITS = 100_000
BOOTSTRAP_DRAWS = 10_000    # ratio_interval's resamples, with a fixed seed
POWER = 0.8                 # for detectable_ratio
TEST_NAME = "an exact permutation test of the means at 5 %"
TIME_TEST_NAME = ("an exact permutation test of the mean time to target at 5 % (a repeat that missed the target "
                  "counted at the budget)")


def censored_times(times, training_times, budget=None):
    """Each repeat's [seconds, reached]: its time to the target, or where it never reached it its training time, at
    least the `budget` where one is given (a run that diverged and stopped early used it up); repeats that failed
    (training time None) are left out."""
    return [[time, True] if time is not None else [max(elapsed, budget or 0.0), False]
            for time, elapsed in zip(times, training_times) if time is not None or elapsed is not None]


def is_censored_sample(values):
    return bool(values) and all(isinstance(v, (list, tuple)) for v in values)


def location(values):
    """The mean of a sample; of censored times, the mean of their seconds (a lower bound where one is censored)."""
    return statistics.fmean(v[0] for v in values) if is_censored_sample(values) else statistics.fmean(values)


def reached_note(values):
    """'k of n reached' of censored times."""
    return f"{sum(1 for _, reached in values if reached)} of {len(values)} reached"


def compared_values(first, second):
    """The two samples as the test sees them: censored times as seconds to the target, each miss at the horizon
    (the longest time either sample ran); other values as they are."""
    if is_censored_sample(first) and is_censored_sample(second):
        horizon = max(t for t, _ in list(first) + list(second))
        return ([t if reached else horizon for t, reached in first],
                [t if reached else horizon for t, reached in second])
    return [float(v) for v in first], [float(v) for v in second]


def p_value(first, second):
    """The two-sided permutation p-value that the two samples' means differ; 1.0 where either has fewer than
    MIN_REPEATS values."""
    if len(first) < MIN_REPEATS or len(second) < MIN_REPEATS:
        return 1.0
    return permutation_p(*compared_values(first, second))


def permutation_p(first, second):
    """The share of the splits of the pooled values into groups of these sizes whose difference of means is at
    least the observed one (exact where there are at most EXACT_SPLITS splits)."""
    import numpy as np

    pooled = np.asarray(list(first) + list(second), dtype=float)
    n, k = len(pooled), len(first)
    total = math.comb(n, k)
    if total <= EXACT_SPLITS:
        chosen = every_split(n, k)
    else:
        order = np.tile(np.arange(n), (MONTE_CARLO_SPLITS, 1))
        chosen = np.random.default_rng(0).permuted(order, axis=1)[:, :k]
    sums = pooled[chosen].sum(axis=1)
    differences = np.abs(sums / k - (pooled.sum() - sums) / (n - k))
    observed = abs(statistics.fmean(first) - statistics.fmean(second))
    tolerance = 1e-9 * max(1.0, float(np.abs(pooled).max()))  # the same split summed in another order
    hits = int((differences >= observed - tolerance).sum())
    return hits / total if total <= EXACT_SPLITS else (hits + 1) / (MONTE_CARLO_SPLITS + 1)


@functools.lru_cache(maxsize=4)
def every_split(n, k):
    """Every choice of k of n indices, one a row: made once for the tables' many tests of the same sizes (184,756
    rows for ten repeats against ten take a tenth of a second to enumerate)."""
    import numpy as np

    chosen = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)), dtype=np.int64,
                         count=math.comb(n, k) * k).reshape(-1, k)
    chosen.flags.writeable = False
    return chosen


def floor(first_size, second_size):
    """The smallest p-value the test can give for samples of these sizes (perfectly separated ones)."""
    if min(first_size, second_size) < MIN_REPEATS:
        return 1.0
    return permutation_p(list(range(first_size)), list(range(first_size, first_size + second_size)))


def holm(p_values):
    """{name: Holm-adjusted p-value} of a family of p-values {name: p}."""
    adjusted, running = {}, 0.0
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    for i, (name, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * p))
        adjusted[name] = running
    return adjusted


def mean_compared(first, second):
    a, b = compared_values(first, second)
    return statistics.fmean(a), statistics.fmean(b)


def leads(faster, slower, alpha=ALPHA):
    """True when `faster`'s times (or values) are lower than `slower`'s beyond their spread: one comparison named
    before the data were seen."""
    if len(faster) < MIN_REPEATS or len(slower) < MIN_REPEATS:
        return False
    low, high = mean_compared(faster, slower)
    return low < high and p_value(faster, slower) < alpha


def exceeds(higher, lower, alpha=ALPHA):
    """True when `higher`'s values (accuracies) are greater than `lower`'s beyond their spread."""
    return leads(lower, higher, alpha)


def verdict(leader, samples, alpha=ALPHA):
    """{winner, tied, p_values, adjusted_p_values}: `leader` (the scheme ranked first, lower is better) wins where
    its lead over every other scheme in `samples` ({scheme: repeats' values}) holds after Holm's correction for the
    choice; otherwise `tied` lists it with every scheme it does not lead beyond the spread."""
    others = [scheme for scheme in samples if scheme != leader]
    p_values = {scheme: p_value(samples[leader], samples[scheme]) for scheme in others}
    adjusted = holm(p_values)
    tied = [leader] + [scheme for scheme in others if not (
        len(samples[leader]) >= MIN_REPEATS and len(samples[scheme]) >= MIN_REPEATS
        and mean_compared(samples[leader], samples[scheme])[0] < mean_compared(samples[leader], samples[scheme])[1]
        and adjusted[scheme] < alpha)]
    return {"winner": leader if len(tied) == 1 else None, "tied": tied, "p_values": p_values,
            "adjusted_p_values": adjusted}


def against_each(one, others, alpha=ALPHA):
    """{faster, slower, p_values, adjusted_p_values}: `one`'s sample against each of `others` ({name: sample}),
    Holm-corrected over them: the names that lead `one` beyond the spread and those it leads."""
    p_values = {name: p_value(one, sample) for name, sample in others.items()}
    adjusted = holm(p_values)
    faster, slower = [], []
    for name, sample in others.items():
        if adjusted[name] < alpha and min(len(one), len(sample)) >= MIN_REPEATS:
            mine, theirs = mean_compared(one, sample)
            (slower if mine < theirs else faster).append(name)
    return {"faster": faster, "slower": slower, "p_values": p_values, "adjusted_p_values": adjusted}


def log_spread(values):
    """The standard deviation of the logarithms of a sample's positive values (times), None below two."""
    logs = [math.log(v) for v in values if v and v > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def pooled_log_spread(samples):
    """The standard deviation of log times within samples, pooled over those with two or more values."""
    spreads = [(len(s) - 1, log_spread(s)) for s in samples if len([v for v in s if v and v > 0]) >= 2]
    degrees = sum(d for d, _ in spreads)
    return math.sqrt(sum(d * sd ** 2 for d, sd in spreads) / degrees) if degrees else None


def detectable_ratio(repeats, spread, alpha=ALPHA, power=POWER):
    """The smallest ratio of two schemes' times that `repeats` a side detect with `power` at `alpha`, for times
    whose logarithms spread by `spread` (a normal approximation of a test on log time); None where the permutation
    test's floor at that many repeats is not below `alpha`."""
    if spread is None or floor(repeats, repeats) >= alpha:
        return None
    normal = statistics.NormalDist()
    return math.exp((normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)) * spread * math.sqrt(2 / repeats))


def ratio_interval(numerator, denominator, draws=BOOTSTRAP_DRAWS, level=0.95):
    """{ratio, low, high, bound}: the ratio of two samples' medians (censored times each a miss at the horizon) and
    its percentile bootstrap interval at `level`, the repeats resampled in pairs (repeat i of both samples ran on
    the same seed) where the samples are of one size, else each on its own; `bound` says which way a miss makes the
    ratio only a bound ("lower" where the numerator missed, "upper" where the denominator did, None where neither
    or both). None below MIN_REPEATS values a side, and where no repeat of either reached the target (two misses
    have no ratio)."""
    import numpy as np

    if len(numerator) < MIN_REPEATS or len(denominator) < MIN_REPEATS:
        return None
    if all(is_censored_sample(v) and not any(reached for _, reached in v) for v in (numerator, denominator)):
        return None
    top, bottom = (np.asarray(v, dtype=float) for v in compared_values(numerator, denominator))
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(top), (draws, len(top)))
    other = picks if len(top) == len(bottom) else rng.integers(0, len(bottom), (draws, len(bottom)))
    ratios = np.median(top[picks], axis=1) / np.median(bottom[other], axis=1)
    low, high = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    missed = [is_censored_sample(v) and not all(reached for _, reached in v) for v in (numerator, denominator)]
    bound = None if missed[0] == missed[1] else ("lower" if missed[0] else "upper")
    return {"ratio": float(np.median(top) / np.median(bottom)), "low": float(low), "high": float(high),
            "bound": bound}
