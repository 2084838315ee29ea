"""What the state server's tests share: a clock the tests move by hand and Django test cases of the HTTP
endpoints, each with a fresh coordinator on that clock."""

import json
from unittest import mock
from urllib.parse import urlencode

from django.test import SimpleTestCase, override_settings

from coordinator import views
from coordination.state import Coordinator

FORM = "application/x-www-form-urlencoded"


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@override_settings(ESYNC_STATE_TOKEN=None)
class EndpointTestCase(SimpleTestCase):
    """Gives each test a fresh coordinator with a fake clock."""

    def setUp(self):
        self.clock = FakeClock()
        self.coordinator = Coordinator(clock=self.clock)
        patcher = mock.patch.object(views, "COORDINATOR", self.coordinator)
        patcher.start()
        self.addCleanup(patcher.stop)

    def post(self, path, **fields):
        return self.client.post(path, urlencode(fields), content_type=FORM)

    def post_json(self, path, body):
        return self.client.post(path, json.dumps(body), content_type="application/json")

    def init(self, num_workers=2, **fields):
        response = self.post("/init/", num_workers=num_workers, **fields)
        self.assertEqual(response.status_code, 200)

    def assertJsonError(self, response, status, field=None):
        self.assertEqual(response.status_code, status)
        self.assertEqual(response["Content-Type"], "application/json")
        body = response.json()
        self.assertIn("error", body)
        if field is not None:
            self.assertEqual(body["field"], field)
            self.assertIn(f"'{field}'", body["error"])
