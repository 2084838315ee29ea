"""Emulated heterogeneity: a worker that behaves like a device F times slower.

After each local step the worker sleeps until the step has taken F x its typical compute time (the median of its
last steps, per sample, times the step's samples: a step on a smaller batch is shorter on a slow device too). A device F times slower has a steady step time; padding by F x each step's own time would also
multiply by F every delay the step met waiting for a core, which on a machine with fewer cores than processes
would make the slow worker's steps far noisier than any real device's.
"""
import collections
import statistics
import time

RECENT_STEPS = 21


class EmulatedSlowdown:
    def __init__(self, factor):
        self.factor = factor
        self.recent = collections.deque(maxlen=RECENT_STEPS)

    @property
    def active(self):
        return self.factor > 1

    def pad(self, compute_seconds, samples=1):
        """Sleep until this step of `samples` samples took factor x the typical compute time of as many; return the
        seconds slept."""
        self.recent.append(compute_seconds / samples)
        pause = max(0.0, self.factor * statistics.median(self.recent) * samples - compute_seconds)
        time.sleep(pause)
        return pause
