"""The training loop reads every time it logs, stops on and times a phase with from its clock object
(training/clocks/), never from the machine's clocks: a run on a clock that advances a fixed amount a reading logs
that clock's times and stops by it."""
import os
import re

from training import config, modes, runlog
from training.checks import check_worker
from training.loop import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SteppingClock:
    """A clock that moves `step` seconds at every reading, whatever the machine does."""
    charges_steps, bounds_waits = False, True

    @staticmethod
    def charge_step(samples):
        """Steps cost what the readings around them say."""

    def __init__(self, step):
        self.step, self.readings = step, 0

    def now(self):
        self.readings += 1
        return self.readings * self.step


def test_the_loop_reads_no_clock_of_the_machine():
    with open(os.path.join(ROOT, "training", "loop.py")) as f:
        source = f.read()

    assert not re.search(r"\btime\.(time|perf_counter|monotonic|process_time)\b", source)
    assert not re.search(r"^import time$", source, re.M)


def test_a_run_logs_its_clocks_times_and_stops_at_its_max_time_by_it(tmp_path):
    args = config.parse_args(["-m", "local", "-n", "lenet", "--dataset", "mnist-5k", "-dd", os.path.join(ROOT, "data"),
                              "-c", "1", "--max-time", "6", "-e", "0", "-ld", str(tmp_path), "--node-name", "n"])
    data, resume = check_worker(args, 1)
    clock = SteppingClock(0.25)

    train(args, modes.scheme_class("local"), data, resume, clock=clock)

    records = runlog.DeviceLog(os.path.join(str(tmp_path), "n", "cpu")).ordered()
    times = [r["total_time"] for r in records]
    assert times == sorted(times) and all((t / 0.25) == round(t / 0.25) for t in times)
    assert times[-1] >= 6.0 and times[-2] < 6.0  # stopped by --max-time on this clock, a few real milliseconds in
    assert all(phase == 0.25 for r in records for step in r["time"].values()
               for name, phase in step.items() if name == runlog.FORWARD_BACKWARD)
