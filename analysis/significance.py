"""Whether one scheme's lead over another holds beyond the spread of their repeats, two-sided, at 5 %.

Times to a target are judged by the log-rank test (SciPy's `stats.logrank` on `stats.CensoredData`): a repeat that
never reached the target has a time of at least its training time, a censored value, and the test uses no more
than that. Welch's t-test on such times with the training time plugged in would shrink the censored group's spread
and answer according to what the censored runs might have done. Other numbers (accuracies, throughputs) are judged
by Welch's t-test (unequal variances). A scheme with fewer than MIN_REPEATS values is never called faster or
slower than another: one run has no spread to judge by.

A repeat's time is a pair [seconds, reached] (censored_times): the seconds to the target where `reached`, else its
training time, a lower bound.
"""
import statistics
import warnings

ALPHA = 0.05
MIN_REPEATS = 2
TEST_NAME = "Welch's t-test at 5 %"
TIME_TEST_NAME = "the log-rank test at 5 % (a repeat that never reached the target censored at its training time)"


def censored_times(times, training_times):
    """Each repeat's [seconds, reached]: its time to the target, or where it never reached it its training time (a
    lower bound); repeats that failed (training time None) are left out."""
    return [[time, True] if time is not None else [elapsed, False] for time, elapsed in zip(times, training_times)
            if time is not None or elapsed is not None]


def is_censored_sample(values):
    return bool(values) and all(isinstance(v, (list, tuple)) for v in values)


def location(values):
    """The mean of a sample; of censored times, the mean of their seconds (a lower bound where one is censored)."""
    return statistics.fmean(v[0] for v in values) if is_censored_sample(values) else statistics.fmean(values)


def reached_note(values):
    """'k of n reached' of censored times."""
    return f"{sum(1 for _, reached in values if reached)} of {len(values)} reached"


def p_value(first, second):
    """The two-sided p-value that the two samples differ: the log-rank test's for censored times, Welch's for other
    values; 1.0 where either has fewer than MIN_REPEATS values."""
    if len(first) < MIN_REPEATS or len(second) < MIN_REPEATS:
        return 1.0
    if is_censored_sample(first) and is_censored_sample(second):
        return logrank_p(first, second)
    return welch_p(first, second)


def logrank_p(first, second):
    """The log-rank p-value of two samples of censored times; 1.0 where neither reached the target at all."""
    if not any(reached for _, reached in list(first) + list(second)):
        return 1.0
    from scipy import stats  # imported here: only the reports that compare repeats need it

    def data(values):
        return stats.CensoredData(uncensored=[t for t, reached in values if reached],
                                  right=[t for t, reached in values if not reached])

    return float(stats.logrank(data(first), data(second)).pvalue)


def welch_p(first, second):
    """Welch's p-value that the two samples' means differ; where neither varies, 0.0 for different means and 1.0
    for equal ones."""
    if statistics.pvariance(first) == 0 and statistics.pvariance(second) == 0:
        return 0.0 if statistics.fmean(first) != statistics.fmean(second) else 1.0
    from scipy import stats

    with warnings.catch_warnings():  # a sample of equal values: scipy warns of its variance's rounding, rightly 0
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(first, second, equal_var=False).pvalue)


def leads(faster, slower, alpha=ALPHA):
    """True when `faster`'s times (or values) are lower than `slower`'s beyond their spread."""
    if len(faster) < MIN_REPEATS or len(slower) < MIN_REPEATS:
        return False
    return location(faster) < location(slower) and p_value(faster, slower) < alpha


def exceeds(higher, lower, alpha=ALPHA):
    """True when `higher`'s values (accuracies) are greater than `lower`'s beyond their spread."""
    return leads(lower, higher, alpha)


def verdict(leader, times, alpha=ALPHA):
    """{winner, tied, p_values}: `leader` (the scheme ranked first) wins where its lead over every other scheme in
    `times` ({scheme: repeats' times}) holds; otherwise `tied` lists it with every scheme it does not lead beyond
    the spread, and `winner` is None."""
    others = [scheme for scheme in times if scheme != leader]
    p_values = {scheme: p_value(times[leader], times[scheme]) for scheme in others}
    tied = [leader] + [scheme for scheme in others if not leads(times[leader], times[scheme], alpha)]
    return {"winner": leader if len(tied) == 1 else None, "tied": tied, "p_values": p_values}
