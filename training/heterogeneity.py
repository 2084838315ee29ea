"""Emulated heterogeneity: a worker that behaves like a device F times slower.

After each local step the worker sleeps (F - 1) x that step's measured compute time. On a machine with fewer
cores than processes the measured compute time includes waiting for a core, so the emulated speed ratio between
workers is the ratio of their measured step times, which the iteration logs record.
"""
import time


class EmulatedSlowdown:
    def __init__(self, factor):
        self.factor = factor

    @property
    def active(self):
        return self.factor > 1

    def pad(self, compute_seconds):
        """Sleep (factor - 1) x the step's compute time; return the seconds slept."""
        pause = (self.factor - 1) * compute_seconds
        time.sleep(pause)
        return pause
