"""Whether one scheme's lead over another holds beyond the spread of their repeats: Welch's t-test (unequal
variances), two-sided, at 5 %, on the times of the repeats to the target.

A repeat that never reached the target counts with its run's training time: its time is at least that, so counting
it so can only understate a lead over it, never invent one. A scheme with fewer than MIN_REPEATS times is never
called faster or slower than another: one run has no spread to judge by.
"""
import statistics
import warnings

ALPHA = 0.05
MIN_REPEATS = 2
TEST_NAME = "Welch's t-test at 5 %"


def censored_times(times, training_times):
    """Each repeat's time to the target, or where it never reached it its training time (a lower bound); repeats
    that failed (training time None) are left out."""
    return [time if time is not None else elapsed for time, elapsed in zip(times, training_times)
            if time is not None or elapsed is not None]


def p_value(first, second):
    """Welch's two-sided p-value that the two samples' means differ; 1.0 where either has fewer than MIN_REPEATS
    values, and where neither varies, 0.0 for different means and 1.0 for equal ones."""
    if len(first) < MIN_REPEATS or len(second) < MIN_REPEATS:
        return 1.0
    if statistics.pvariance(first) == 0 and statistics.pvariance(second) == 0:
        return 0.0 if statistics.fmean(first) != statistics.fmean(second) else 1.0
    from scipy import stats  # imported here: only the reports that compare repeats need it

    with warnings.catch_warnings():  # a sample of equal values: scipy warns of its variance's rounding, rightly 0
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(first, second, equal_var=False).pvalue)


def leads(faster, slower, alpha=ALPHA):
    """True when `faster`'s times are lower than `slower`'s beyond their spread."""
    if len(faster) < MIN_REPEATS or len(slower) < MIN_REPEATS:
        return False
    return statistics.fmean(faster) < statistics.fmean(slower) and p_value(faster, slower) < alpha


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
