"""The state server's wire protocol declared once (coordination/protocol.py): the client's requests are built from
it, and the Django server serves every declared endpoint at its path and checks its declared fields."""
import pytest

from coordination import protocol
from tests.state_server_helpers import EndpointTestCase

pytestmark = pytest.mark.usefixtures("quiet_coordinator_console")  # tests/conftest.py


def test_a_request_carries_the_declared_fields_leaves_out_absent_options_and_sends_switches_as_numbers():
    assert protocol.request(protocol.PLAN, r=1, c=0.5, a=None) == {"r": 1, "c": 0.5}
    assert protocol.request(protocol.WATCH, r=0, t=3, arrived=True, wait=1.0) == {"r": 0, "t": 3, "arrived": 1,
                                                                                  "wait": 1.0}


def test_a_field_the_endpoint_does_not_declare_or_a_missing_one_is_a_bug():
    with pytest.raises(TypeError, match="/apply/ has no field 'rank'"):
        protocol.request(protocol.APPLY, rank=1, k=1, c=0.1, te=0.0)
    with pytest.raises(TypeError, match="/apply/ needs field 'te'"):
        protocol.request(protocol.APPLY, r=1, k=1, c=0.1)


class DeclaredEndpointTests(EndpointTestCase):
    """Every declared endpoint, through the real Django views and URLs."""

    def test_every_endpoint_is_served_at_its_path_with_its_method_only(self):
        for endpoint in protocol.ENDPOINTS:
            wrong = self.client.get if endpoint.method == "POST" else self.client.post
            with self.subTest(path=endpoint.path):
                self.assertEqual(wrong(endpoint.path).status_code, 405)

    def test_every_required_field_of_every_endpoint_is_checked_by_name(self):
        self.init(num_workers=2)
        for endpoint in protocol.ENDPOINTS:
            for field in endpoint.fields:
                if not field.required:
                    continue
                others = {f.name: 1 for f in endpoint.fields if f.required and f is not field}
                with self.subTest(path=endpoint.path, field=field.name):
                    self.assertJsonError(self.post(endpoint.path, **others), 400, field.name)

    def test_a_declared_minimum_is_checked(self):
        self.init(num_workers=2)
        for endpoint in protocol.ENDPOINTS:
            for field in endpoint.fields:
                if field.minimum is None:
                    continue
                values = {f.name: 1 for f in endpoint.fields if f.required}
                values[field.name] = field.minimum - 1
                with self.subTest(path=endpoint.path, field=field.name):
                    self.assertJsonError(self.post(endpoint.path, **values), 400, field.name)


RULE_MODULE = '''
from coordination.rules.base import Rule

NAME = "every-third"


class EveryThird(Rule):
    """Plans three local steps a round, whatever the step times."""

    def plan(self, job, rank):
        return {"k": 3}


RULE = EveryThird(NAME, esync=True)
'''


class AddedRuleTests(EndpointTestCase):
    """A coordination rule added as one module and one registry entry is answered by the real views."""

    def test_a_rule_module_registered_by_name_answers_its_jobs(self):
        import importlib.util
        import os
        import tempfile
        from unittest import mock

        from coordination import rules

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "every_third.py")
            with open(path, "w") as f:
                f.write(RULE_MODULE)
            spec = importlib.util.spec_from_file_location("every_third", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        with mock.patch.dict(rules.RULES, {module.NAME: module.RULE}):
            self.init(num_workers=2, policy="every-third")
            self.assertEqual(self.post("/plan/", r=0, c=0.01).json(), {"k": 3})
            self.assertEqual(self.client.get("/").json()["policy"], "every-third")
        self.assertJsonError(self.post("/init/", num_workers=2, policy="every-third"), 400, "policy")
