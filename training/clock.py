"""The clock the training loop reads its time from.

Every time the loop logs, stops on (--max-time, --eval-seconds) or times a phase with comes from one clock object:
the machine's (REAL, the default), or one that a simulated run advances by what each step and transfer is charged
rather than by what it took. The loop never reads the machine's clocks itself (tests/test_clock.py holds it to that).
"""
import time


class RealClock:
    """The machine's monotonic clock: seconds since an arbitrary start."""

    @staticmethod
    def now():
        return time.perf_counter()


REAL = RealClock()
