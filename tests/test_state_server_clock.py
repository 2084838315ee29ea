"""The state server's log lines carry the machine's local time, as the workers' do (SimpleStateServer/statesite/
settings.py: TIME_ZONE is the machine's zone, where Django's default would make America/Chicago the process's)."""
import os
import subprocess
import sys

import pytest

from launcher.cluster import ROOT

# The time of a log line at a fixed instant, as the state server's logging configuration writes it (argument
# "server") or as a worker's logging does, from time.localtime() (argument "worker").
LOG_TIME = """
import logging, sys
record = logging.makeLogRecord({"created": 1e9, "msecs": 0})
if sys.argv[1] == "server":
    import django
    django.setup()
    formatter = logging.getLogger("coordinator").handlers[0].formatter
else:
    formatter = logging.Formatter()
print(formatter.formatTime(record))
"""


def log_time(process, tz):
    """The time a process of the kind given writes in its log lines, with TZ set to `tz` (None: unset, the zone
    /etc/localtime names)."""
    env = {key: value for key, value in os.environ.items() if key != "TZ"}  # Django set this process's TZ
    env.update({"PYTHONPATH": os.path.join(ROOT, "SimpleStateServer"), "DJANGO_SETTINGS_MODULE": "statesite.settings"})
    if tz is not None:
        env["TZ"] = tz
    result = subprocess.run([sys.executable, "-c", LOG_TIME, process], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("tz", [None, "Asia/Tokyo", ":America/Sao_Paulo", "XYZ-3"])
def test_the_state_server_logs_the_local_time_of_the_machine_as_the_workers_do(tz):
    """The machine's zone, be it named by /etc/localtime or by TZ, or a rule in TZ that names no zone file."""
    assert log_time("server", tz) == log_time("worker", tz)
