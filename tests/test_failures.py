"""The one line a failing process leaves, and the fault plan that tests inject."""
import os
import signal
import subprocess
import sys

import pytest

from launcher.cluster import ROOT
from training.faults import failures
from training.faults.fault_injection import FaultPlan, InjectedFault


def raise_from_project_code():
    raise ValueError("the batch is empty")


def caught(function):
    try:
        function()
    except Exception as err:
        return err


def test_the_one_line_names_the_error_its_message_and_the_innermost_project_frame():
    line = failures.one_line(caught(raise_from_project_code))

    assert line.startswith("ValueError: the batch is empty (tests/test_failures.py:")
    assert line.endswith(" in raise_from_project_code)")


def test_a_multi_line_message_is_cut_to_its_last_line_the_failed_check():
    class MXNetError(Exception):
        pass

    message = 'Traceback (most recent call last):\n  File "ndarray.cc", line 1860\nMXNetError: Invalid NDArray file format'

    def load():
        raise MXNetError(message)

    assert failures.one_line(caught(load)).startswith("MXNetError: Invalid NDArray file format (")


def test_the_traceback_is_saved_where_the_line_says(tmp_path):
    err = caught(raise_from_project_code)

    path = failures.save_traceback(err, str(tmp_path), "worker")

    assert path == os.path.join(str(tmp_path), f"traceback-worker-{os.getpid()}.txt")
    assert "raise_from_project_code" in open(path).read()


def test_a_fault_fires_on_the_nth_pass_of_its_point_only():
    plan = FaultPlan.parse("worker:aggregation:raise:after=3")

    plan.reached("worker", "aggregation", 0)
    plan.reached("worker", "aggregation", 1)
    plan.reached("worker", "training", 0)
    with pytest.raises(InjectedFault, match="fault injected at worker aggregation"):
        plan.reached("worker", "aggregation", 0)
    plan.reached("worker", "aggregation", 0)


def test_an_injected_fault_is_placed_at_the_point_that_reached_it_not_in_the_injector():
    plan = FaultPlan.parse("worker:setup:raise")

    def setup_point():
        plan.reached("worker", "setup", 0)

    line = failures.one_line(caught(setup_point))
    assert "in setup_point)" in line and "fault_injection.py" not in line, line


def test_the_innermost_project_frame_is_the_projects_own_not_a_library_installed_in_the_clone():
    import numpy as np

    def compare():
        np.testing.assert_equal(1, 2)

    line = failures.one_line(caught(compare))
    assert "in compare)" in line and "site-packages" not in line, line


def test_a_rank_filtered_fault_ignores_the_other_ranks_and_roles():
    plan = FaultPlan.parse("worker:setup:raise:rank=0")

    plan.reached("worker", "setup", 1)
    plan.reached("server", "setup", None)
    with pytest.raises(InjectedFault):
        plan.reached("worker", "setup", 0)


@pytest.mark.parametrize("text", ["worker:aggregation", "worker:lunch:raise", "boss:start:raise",
                                  "worker:start:explode", "worker:start:raise:after=0", "worker:start:raise:when=3"])
def test_a_malformed_fault_plan_is_refused_with_the_expected_form(text):
    with pytest.raises(ValueError, match="expected <role>:<phase>:<raise|kill>"):
        FaultPlan.parse(text)


# A process that drops its KeyboardInterrupt, as Python does when one is raised in a destructor: it must still end.
SWALLOWS_ITS_INTERRUPT = """
import logging, os, signal, sys, time
from training.faults import failures
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
failures.end_on_interrupts(logging.getLogger("main"))
try:
    print("ready", flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    pass  # dropped
time.sleep(30)
sys.exit(0)
"""


# A process whose main thread waits in a C call that signals do not interrupt, as an MPI receive from a rank that
# is gone does: Python never gets to run a signal handler in it.
BLOCKED_IN_C = """
import ctypes, logging
from training.faults import failures
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
failures.end_on_interrupts(logging.getLogger("main"))
libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)  # zeros: a default mutex, unlocked
libc.pthread_mutex_lock(mutex)
try:
    print("ready", flush=True)
    libc.pthread_mutex_lock(mutex)  # a default mutex locked twice by its owner waits for ever
except KeyboardInterrupt:  # the signal came before the wait began: dropped, and the wait begins
    libc.pthread_mutex_lock(mutex)
"""


@pytest.mark.parametrize("script", [SWALLOWS_ITS_INTERRUPT, BLOCKED_IN_C], ids=["dropped", "blocked-in-c"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGQUIT], ids=["SIGINT", "SIGQUIT"])
def test_a_cluster_process_whose_interrupt_is_dropped_still_says_so_and_exits_130(sig, script):
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=failures.INTERRUPT_GRACE + 20)
    finally:
        proc.kill()
        proc.wait()

    assert proc.returncode == failures.EXIT_INTERRUPTED and "main WARNING interrupted" in output, output


# A process that ends on its KeyboardInterrupt as main.py does in a cluster, and takes a while to exit, long enough
# for the fallback timer and a SIGQUIT after the SIGINT (mpiexec sends one) to try to end it too.
ENDS_SLOWLY = """
import logging, os, sys, time
from training.faults import failures
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
log = logging.getLogger("main")

def exit_slowly(code):
    print("ending", flush=True)
    time.sleep(failures.INTERRUPT_GRACE + 2)
    os._exit(code)

failures.end_now = exit_slowly
failures.end_on_interrupts(log)
try:
    print("ready", flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    failures.end_interrupted(log)
"""


def test_a_process_ended_by_its_interrupt_and_by_a_later_signal_says_interrupted_once():
    proc = subprocess.Popen([sys.executable, "-c", ENDS_SLOWLY], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        lines = [proc.stdout.readline()]
        while lines[-1] and "ending" not in lines[-1]:
            lines.append(proc.stdout.readline())
        proc.send_signal(signal.SIGQUIT)
        output, _ = proc.communicate(timeout=failures.INTERRUPT_GRACE + 20)
    finally:
        proc.kill()
        proc.wait()

    output = "".join(lines) + output
    assert proc.returncode == failures.EXIT_INTERRUPTED and output.count("main WARNING interrupted") == 1, output
