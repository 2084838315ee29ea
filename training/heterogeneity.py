"""Emulated heterogeneity: a worker that behaves like a device F times slower.

After each local step the worker sleeps until the step has taken F x its typical compute time (the median of its
last steps). A device F times slower has a steady step time; padding by F x each step's own time would also
multiply by F every delay the step met waiting for a core, which on a machine with fewer cores than processes
would make the slow worker's steps far noisier than any real device's.

The first step is not padded and does not count as typical: it also sets up the graph's primitives and memory, a
one-time cost (35-50 ms for lenet alone, 0.6-0.9 s while six processes start on two cores, against a 7 ms step)
that a slower device pays once, not F times. Counted, it made a 20x worker sleep up to 17 s before its second step.
"""
import collections
import statistics
import time

RECENT_STEPS = 21
SET_UP_STEPS = 1


class EmulatedSlowdown:
    def __init__(self, factor):
        self.factor = factor
        self.recent = collections.deque(maxlen=RECENT_STEPS)
        self.steps = 0

    @property
    def active(self):
        return self.factor > 1

    def pad(self, compute_seconds):
        """Sleep until this step took factor x the typical compute time; return the seconds slept."""
        self.steps += 1
        if self.steps <= SET_UP_STEPS:
            return 0.0
        self.recent.append(compute_seconds)
        pause = max(0.0, self.factor * statistics.median(self.recent) - compute_seconds)
        time.sleep(pause)
        return pause
