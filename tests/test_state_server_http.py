"""Tests of the ESync state server as an HTTP service: its state page, routing and access, concurrent requests,
no input reaching the 500 path, and the development server."""

import json
import socket
import threading
from unittest import mock
from urllib.parse import urlencode

import pytest
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from coordinator import views
from coordinator.management.commands.runserver import NoDelayWSGIServer
from coordination.state import Coordinator
from tests.state_server_helpers import FORM, EndpointTestCase

pytestmark = pytest.mark.usefixtures("quiet_coordinator_console")  # tests/conftest.py


class StateEndpointTests(EndpointTestCase):
    def test_state_before_init_shows_no_job(self):
        response = self.client.get("/")

        self.assertEqual(response.status_code, 200)
        self.assertIsNone(response.json()["num_workers"])

    def test_state_shows_workers_and_request_counts(self):
        self.init(2, epsilon=0.5)
        self.post("/apply/", r=0, k=1, c=0.3, te=7.0)
        self.post("/reset/", r=1, t=1, te=8.0)
        self.post("/plan/", r=1, c=0.1)

        state = self.client.get("/").json()

        self.assertEqual(state["requests"], {"apply": 1, "reset": 1, "plan": 1, "arrive": 0, "watch": 0})
        self.assertEqual(state["workers"][0]["te"], 7.0)
        self.assertEqual(state["workers"][1]["c"], 0.1)
        self.assertEqual(state["epsilon"], 0.5)

    def test_post_on_state_is_405_json(self):
        self.assertJsonError(self.client.post("/"), 405)


class RoutingAndAccessTests(EndpointTestCase):
    def test_unknown_path_is_404_json(self):
        self.assertJsonError(self.client.get("/no/such/thing"), 404)

    @override_settings(DEBUG=True)
    def test_unknown_path_is_404_json_with_debug_on(self):
        self.assertJsonError(self.client.post("/admin/"), 404)

    @override_settings(ALLOWED_HOSTS=["state.example"])
    def test_disallowed_host_is_400_json(self):
        self.assertJsonError(self.client.get("/"), 400)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_missing_token_is_401_json(self):
        self.assertJsonError(self.client.get("/"), 401)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_wrong_token_is_401_json(self):
        self.assertJsonError(self.client.get("/", HTTP_X_ESYNC_TOKEN="guess"), 401)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_token_is_required_for_unknown_paths_too(self):
        self.assertJsonError(self.client.get("/nothing"), 401)

    @override_settings(ESYNC_STATE_TOKEN="s3cret")
    def test_right_token_is_let_through(self):
        response = self.client.post("/init/", urlencode({"num_workers": 1}), content_type=FORM,
                                    HTTP_X_ESYNC_TOKEN="s3cret")

        self.assertEqual(response.status_code, 200)

    def test_unexpected_exception_becomes_json_500_and_is_logged(self):
        self.init(1)
        with mock.patch.object(self.coordinator, "apply", side_effect=RuntimeError("boom")):
            with self.assertLogs("coordinator", "ERROR"), self.assertLogs("django.request"):
                response = self.post("/apply/", r=0, k=1, c=0.1, te=0)

        self.assertJsonError(response, 500)


class ConcurrencyTests(EndpointTestCase):
    def test_parallel_applies_and_resets_leave_consistent_counts(self):
        self.init(4, epsilon=0.01)
        failures = []

        def worker_thread(rank):
            client = Client()
            for step in range(200):
                if step % 4 == 3:
                    response = client.post("/reset/", urlencode({"r": rank, "t": step, "te": 0}),
                                           content_type=FORM)
                else:
                    fields = {"r": rank, "k": step % 4 + 1, "c": 0.01 * (rank + 1), "te": 0}
                    response = client.post("/apply/", urlencode(fields), content_type=FORM)
                if response.status_code != 200:
                    failures.append(response.content)

        threads = [threading.Thread(target=worker_thread, args=(i % 4,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        state = self.client.get("/").json()
        self.assertEqual(failures, [])
        self.assertEqual(state["requests"], {"apply": 1200, "reset": 400, "plan": 0, "arrive": 0, "watch": 0})
        self.assertEqual([w["applies"] for w in state["workers"]], [300] * 4)
        self.assertEqual([w["resets"] for w in state["workers"]], [100] * 4)


# ---------------------------------------------------------------- no input reaches the 500 path

FIELD_NAMES = ["num_workers", "epsilon", "policy", "r", "k", "c", "te", "t"]
ENDPOINTS = ["/init/", "/apply/", "/reset/", "/plan/", "/", "/apply", "/other"]
text_values = st.one_of(
    st.text(max_size=12),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["nan", "-inf", "1e999", "-0", "0x10", " 1 ", "1_0", "\x00", "0", "1"]),
)
form_bodies = st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), text_values,
                              max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6,
)
json_bodies = st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=6) | json_values
fuzz_settings = hypothesis_settings(max_examples=150, derandomize=True, database=None,
                                    deadline=None,
                                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def fresh_coordinator(settings):
    settings.ESYNC_STATE_TOKEN = None
    coordinator = Coordinator()
    with mock.patch.object(views, "COORDINATOR", coordinator):
        yield coordinator


def assert_handled(response):
    assert response.status_code in {200, 400, 404, 405, 409}, response.content
    assert response["Content-Type"] == "application/json"
    assert isinstance(json.loads(response.content), dict)


@fuzz_settings
@given(endpoint=st.sampled_from(ENDPOINTS), body=form_bodies, initialised=st.booleans())
def test_no_form_body_reaches_the_safety_net(fresh_coordinator, endpoint, body, initialised):
    client = Client()
    if initialised:
        fresh_coordinator.init(3)

    assert_handled(client.post(endpoint, urlencode(body), content_type=FORM))


@fuzz_settings
@given(endpoint=st.sampled_from(ENDPOINTS), body=json_bodies)
def test_no_json_body_reaches_the_safety_net(fresh_coordinator, endpoint, body):
    fresh_coordinator.init(3)

    response = Client().post(endpoint, json.dumps(body), content_type="application/json")

    assert_handled(response)


@fuzz_settings
@given(endpoint=st.sampled_from(ENDPOINTS), body=st.binary(max_size=64),
       content_type=st.sampled_from(["application/json", FORM, "multipart/form-data",
                                     "multipart/form-data; boundary=x", "text/plain"]))
def test_no_raw_body_reaches_the_safety_net(fresh_coordinator, endpoint, body, content_type):
    fresh_coordinator.init(3)

    assert_handled(Client().post(endpoint, body, content_type=content_type))


# ---------------------------------------------------------------- the development server


def test_runserver_connections_send_small_answers_without_delay():
    with NoDelayWSGIServer(("127.0.0.1", 0), None) as server:
        with socket.create_connection(server.server_address):
            connection, _ = server.get_request()
            with connection:
                nodelay = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    assert nodelay != 0
