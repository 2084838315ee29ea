import compileall
import gc
import logging
import os
import shutil
import sys
import tempfile
from unittest import mock

import pytest

from training import mxnet_internals

mxnet_internals.install()  # as main.py does: the test processes import MXNet too (1.5 s of CPU less in each)

from data import DATA_PATH_VARIABLE  # noqa: E402
from launcher.cluster import ROOT, ProcessGroup  # noqa: E402


def pytest_configure(config):
    """Where a process looks for a dataset without -dd: the repository's data/, then a folder of this session's where
    fashion-mnist is the shipped MNIST sample under that name (standing in for /usr/share/datasets), so that no test
    depends on what this machine has installed. A test of the real Fashion-MNIST gives its folder with -dd."""
    # numpy's own BLAS, which no process of the project computes with, starts one thread per core when numpy is
    # imported: one thread each spares the hundreds of short processes the tests start their system time. MXNet's
    # OpenBLAS reads the variable too, so the tests' processes multiply matrices on one thread, as a job's processes
    # do under the launcher's OMP_NUM_THREADS=1, which both OpenBLAS libraries also read.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # One OpenMP thread in every process, as the launcher gives its workers: the tests' own processes and MPI ranks
    # otherwise take one a core, and idle ones spin (a whole run: 1,052 s of CPU against 1,110 s).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    stand_in = tempfile.mkdtemp(prefix="esync-test-datasets-")
    os.symlink(os.path.join(ROOT, "data", "mnist-5k"), os.path.join(stand_in, "fashion-mnist"))
    os.environ[DATA_PATH_VARIABLE] = f"{os.path.join(ROOT, 'data')}:{stand_in}"
    config.add_cleanup(lambda: shutil.rmtree(stand_in, ignore_errors=True))


# With PYTHONDONTWRITEBYTECODE set each of the hundreds of processes the tests start would compile the same modules
# again, and pytest rewrite the assertions of every test module again in each of its three workers (2.6 s of CPU
# each): here the first process to import a module caches its bytecode and the others read it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


SOURCE_SKIPPED = ("logs",)  # the runs' folders: no source, and thousands of files after a few experiments


def pytest_sessionstart(session):
    """Byte-compile the repository once: with PYTHONDONTWRITEBYTECODE set no process caches what it compiles, and
    the hundreds of processes the tests start would each compile the same modules again. Only the project's own
    folders are walked: a walk of the whole clone went through the environment's tens of thousands of files too (a
    run of one test took 4.8 s of CPU against 1.35 s, medians of 5)."""
    for entry in os.scandir(ROOT):
        if entry.name.startswith(".") or entry.name in SOURCE_SKIPPED:
            continue
        if entry.is_dir(follow_symlinks=False):
            compileall.compile_dir(entry.path, quiet=1)
        elif entry.name.endswith(".py"):
            compileall.compile_file(entry.path, quiet=1)


@pytest.hookimpl(wrapper=True)  # around every other plugin's, pytest-xdist's reading of the groups included
def pytest_collection_modifyitems(items):
    """Three groups for pytest.ini's three workers (-n 3 --dist loadgroup): the tests that start real processes and
    check timing run one after another on one worker ("real-processes"); jobs of two such tests at once would each take
    cores the other's timing counts on. A real-process test marked `beside_others` checks nothing that depends on
    timing (or mostly waits on timeouts, or runs on a virtual clock) and runs beside them ("beside"), as the
    in-process tests do ("in-process"), on the CPU time the timed tests leave idle. A test of a module marked
    `beside_others` that is marked `beside_others(False)` itself runs with the timed tests all the same, and one
    marked `beside_others("in-process")` with the in-process tests: each moves its length from one group to another,
    to balance them."""
    for item in items:
        beside = item.get_closest_marker("beside_others")
        slow = item.get_closest_marker("slow")
        alone = slow and (beside is None or beside.args == (False,))
        group = "real-processes" if alone else "in-process" if not slow or beside.args == ("in-process",) else "beside"
        item.add_marker(pytest.mark.xdist_group(group))
    return (yield)


def pytest_collection_finish(session):
    """What collecting imported (MXNet, Django, Optuna, matplotlib, the tests) lives as long as the worker: kept out
    of the garbage collector's full collections, which visited all of it, a twelfth of an in-process worker's CPU."""
    gc.freeze()


@pytest.fixture
def processes(tmp_path):
    """A ProcessGroup whose processes are all stopped (by PID) when the test ends, pass or fail."""
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        yield group
    finally:
        group.stop()


@pytest.fixture
def quiet_coordinator_console():
    """Keeps the hundreds of expected 4xx log lines off the console under `pytest -s`;
    assertLogs still sees them because it installs its own handler."""
    with mock.patch.object(logging.getLogger("coordinator"), "handlers", [logging.NullHandler()]):
        yield
