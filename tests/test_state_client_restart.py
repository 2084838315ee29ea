"""StateClient when the state server has lost its job (a restart): the hook, the bounded retries, failing fast."""
import socket
import time

import pytest

from tests.test_state_client import JSON, scripted_server
from coordination.client import StateClient, StateServerError, StateServerUnavailable

NO_JOB = (409, JSON, b'{"error":"no job yet: POST /init/ first"}')


def test_a_409_calls_the_hook_before_each_retry_until_the_job_is_back():
    calls = []
    with scripted_server(NO_JOB, NO_JOB, (200, JSON, b'{"ok":1}')) as (port, handler):
        with StateClient("127.0.0.1", port, retry_for=5.0, on_not_initialised=lambda: calls.append(1)) as client:
            client.reset(1, t=7, te=0.0)

    assert len(calls) == 2
    assert len(handler.seen) == 3


def test_a_409_without_a_hook_raises_at_once():
    with scripted_server(NO_JOB) as (port, _):
        with StateClient("127.0.0.1", port, retry_for=5.0) as client:
            with pytest.raises(StateServerError) as raised:
                client.reset(1, t=7, te=0.0)

    assert raised.value.status == 409


def test_a_job_that_never_comes_back_raises_unavailable_within_the_retry_period():
    with scripted_server(*[NO_JOB] * 50) as (port, _):
        with StateClient("127.0.0.1", port, retry_for=0.3, on_not_initialised=lambda: None) as client:
            started = time.monotonic()
            with pytest.raises(StateServerUnavailable, match=f"http://127.0.0.1:{port}.*no job"):
                client.plan(1, c=0.1)

    assert time.monotonic() - started < 2.0


def test_apply_without_retries_fails_at_once():
    with socket.socket() as bound_not_listening:
        bound_not_listening.bind(("127.0.0.1", 0))
        client = StateClient("127.0.0.1", bound_not_listening.getsockname()[1], retry_for=30.0)
        started = time.monotonic()

        with pytest.raises(StateServerUnavailable):
            client.apply(0, k=1, c=0.1, te=0.0, retry_for=0)

    assert time.monotonic() - started < 1.0


def test_a_retried_request_no_longer_wanted_is_dropped():
    wanted = [True]

    def hook():
        wanted[0] = False  # e.g. the worker moved past the round while the server was away

    with scripted_server(NO_JOB, (200, JSON, b'{"finished":1,"gathered":1}')) as (port, handler):
        with StateClient("127.0.0.1", port, retry_for=5.0, on_not_initialised=hook) as client:
            status = client.watch(0, t=3, arrived=True, wait=0.1, still_wanted=lambda: wanted[0])

    assert status is None
    assert len(handler.seen) == 1
