"""Every number of every endpoint has a range a real job can need: a huge, negative or NaN value is 400 JSON naming
the field, and the job is left as it was."""
from coordination import protocol
from tests.state_server_helpers import EndpointTestCase

VALID = {"r": 1, "t": 0, "k": 1, "c": 0.5, "te": 1.0, "a": 0.1, "arrived": 0, "wait": 0.0, "num_workers": 2,
         "epsilon": 0.05, "share": 0.1, "max_slowest_steps": 4, "accept": 1}
POLICIES = {"/plan/": "plan", "/arrive/": "nbsync", "/watch/": "nbsync"}


def bad_values(field):
    """Values out of the field's range, or no number at all."""
    return [field.maximum * 10 + 1, -field.maximum * 10 - 1, "nan", "inf"]


class BoundedFieldTests(EndpointTestCase):
    def test_every_numeric_field_of_every_endpoint_refuses_what_no_job_can_need(self):
        for endpoint in protocol.ENDPOINTS:
            for field in endpoint.fields:
                if field.kind not in (protocol.INTEGER, protocol.NUMBER):
                    continue
                self.assertIsNotNone(field.maximum, f"{endpoint.path} {field.name} has no upper bound")
                for value in bad_values(field):
                    with self.subTest(path=endpoint.path, field=field.name, value=value):
                        self.init(2, policy=POLICIES.get(endpoint.path, "apply"))
                        before = self.client.get("/").json()
                        body = {f.name: VALID[f.name] for f in endpoint.fields if f.required}
                        response = self.post(endpoint.path, **{**body, field.name: value})

                        self.assertJsonError(response, 400, field.name)
                        self.assertEqual(self.client.get("/").json(), before)
