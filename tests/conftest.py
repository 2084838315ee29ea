import pytest

from launcher.cluster import ProcessGroup


@pytest.fixture
def processes(tmp_path):
    """A ProcessGroup whose processes are all stopped (by PID) when the test ends, pass or fail."""
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        yield group
    finally:
        group.stop()
