import compileall
import os
import re

import pytest

from launcher.cluster import ROOT, ProcessGroup


def pytest_sessionstart(session):
    """Byte-compile the repository once: with PYTHONDONTWRITEBYTECODE set no process caches what it compiles, and
    the hundreds of processes the tests start would each compile the same modules again."""
    compileall.compile_dir(ROOT, quiet=1, rx=re.compile(re.escape(os.sep) + r"\.venv" + re.escape(os.sep)))


def pytest_collection_modifyitems(items):
    """The tests that start real processes run one after another on one pytest worker (pytest.ini's -n 2
    --dist loadgroup): jobs of two such tests at once would each take cores the other's timing counts on."""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group("real-processes"))


@pytest.fixture
def processes(tmp_path):
    """A ProcessGroup whose processes are all stopped (by PID) when the test ends, pass or fail."""
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        yield group
    finally:
        group.stop()
