"""The clock the training loop reads its time from: the machine's, or a virtual one.

Every time the loop logs, stops on (--max-time, --eval-seconds) or times a phase with comes from one clock object
(tests/test_clock.py holds the loop to that). REAL is the machine's. A virtual clock (virtual.py) belongs to one
worker of a job on a virtual clock: the whole job runs in one process, its workers one at a time in the order of
their virtual times (scheduler.py), each step charged its device's declared seconds and each transfer its links'
(training/transport/virtual.py), so a run is the same whatever else the machine does (docs/virtual-clock.md).
"""
import time


class RealClock:
    """The machine's monotonic clock: seconds since an arbitrary start."""
    charges_steps = False  # a slow device's step is slowed in real time (the loop's emulation), not charged
    bounds_waits = True    # a wait on the cluster outlasting --sync-timeout ends the worker (the watchdog)

    @staticmethod
    def now():
        return time.perf_counter()

    @staticmethod
    def charge_step(samples):
        """A step's computing is measured, not charged."""


REAL = RealClock()
