"""The state server on a shared network: the launcher's jobs carry a fresh token, a server reachable from other
machines without one says so, and Django's deployment checklist finds nothing with the README's settings."""
import io
import os
import subprocess
import sys
from unittest import mock

import pytest

from launcher.cluster import ROOT
from tests.test_launch import LENET, launcher, pid_of, read_output, training_started, wait_for
from coordination.client import TOKEN_ENV, TOKEN_HEADER

MANAGE_PY = os.path.join(ROOT, "SimpleStateServer", "manage.py")


def runserver_command():
    from coordinator.management.commands import runserver

    command = runserver.Command(stdout=io.StringIO(), stderr=io.StringIO())
    command.addr, command.port = "0.0.0.0", "10010"
    return runserver, command


@pytest.mark.parametrize("token, address, warned", [(None, "0.0.0.0", True), (None, "10.1.1.34", True),
                                                    (None, "127.0.0.1", False), (None, "::1", False),
                                                    ("s3cret", "0.0.0.0", False)])
def test_a_server_others_can_reach_without_a_token_warns_in_one_line(settings, token, address, warned):
    settings.ESYNC_STATE_TOKEN = token
    runserver, command = runserver_command()
    command.addr = address
    with mock.patch.object(runserver.DjangoRunserverCommand, "inner_run"):  # not served: nothing binds
        command.inner_run()

    lines = command.stderr._out.getvalue().splitlines()
    assert len(lines) == (1 if warned else 0)
    assert not warned or "anyone who reaches" in lines[0] and "ESYNC_STATE_TOKEN" in lines[0]


def test_the_deployment_checklist_finds_nothing_with_the_readmes_settings():
    result = subprocess.run([sys.executable, MANAGE_PY, "check", "--deploy"], capture_output=True, text=True,
                            env={**os.environ, TOKEN_ENV: "a-long-random-secret"}, timeout=60)

    assert result.returncode == 0 and "no issues" in result.stdout, result.stdout + result.stderr


def state_server_address(logs, mode):
    """(host, port, its token) of the running state server of a launcher run."""
    pid = pid_of(logs, mode, "state-server")
    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
    environ = dict(e.split("=", 1) for e in open(f"/proc/{pid}/environ").read().split("\0") if "=" in e)
    host, port = argv[argv.index("runserver") + 1].rsplit(":", 1)
    return host, int(port), environ.get(TOKEN_ENV)


def status_of(host, port, token=None):
    import http.client

    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("GET", "/", headers={TOKEN_HEADER: token} if token else {})
    status = connection.getresponse().status
    connection.close()
    return status


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # its checks do not depend on timing: where the groups' lengths balance
def test_a_launcher_run_of_esync_trains_with_a_fresh_token_that_others_lack(tmp_path):
    logs = str(tmp_path / "logs")
    with launcher(["--modes", "esync", "--devices", "cpu,cpu", "--max-time", "6", "--no-figures", *LENET],
                  logs) as proc:
        wait_for(lambda: training_started(logs, "esync", 2), 90, "iteration logs")
        host, port, token = state_server_address(logs, "esync")
        answers = [status_of(host, port), status_of(host, port, "a-guess"), status_of(host, port, token)]
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    assert token and len(token) >= 24 and answers == [401, 401, 200]
    assert token not in output  # the secret is nowhere in the launcher's own output


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_real_server_refuses_out_of_range_fields_and_a_rank_of_another_job_and_keeps_its_jobs(tmp_path):
    import http.client
    import json
    from urllib.parse import urlencode

    from launcher.cluster import STATE_TOKEN_VARIABLE, ProcessGroup, start_state_server

    def post(path, **fields):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("POST", path, urlencode(fields), {"Content-Type": "application/x-www-form-urlencoded",
                                                             TOKEN_HEADER: "t0ken"})
        response = connection.getresponse()
        answer = response.status, json.loads(response.read())
        connection.close()
        return answer

    with ProcessGroup(str(tmp_path / "processes"), {STATE_TOKEN_VARIABLE: "t0ken"}) as group:
        port = start_state_server(group)
        post("/init/", num_workers=6, policy="apply", job="a")
        post("/init/", num_workers=2, policy="plan", job="b")
        answers = [post("/plan/", r=0, c=c, job="b") for c in ("nan", "1e12", "-1")]
        conflict = post("/apply/", r=4, k=1, c=0.1, te=1.0, job="b")
        kept = [post("/plan/", r=1, c=0.1, job="b"), post("/apply/", r=4, k=1, c=0.1, te=1.0, job="a")]

    assert [(status, body.get("field")) for status, body in answers] == [(400, "c")] * 3
    assert conflict[0] == 409 and conflict[1]["conflict"] == 1
    assert [status for status, _ in kept] == [200, 200] and kept[0][1]["k"] == 1
