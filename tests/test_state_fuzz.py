"""Random request sequences against the state server's views: its invariants hold after every request."""
import json
from unittest import mock
from urllib.parse import urlencode

from django.test import Client
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from coordinator import views
from coordination.state import Coordinator

FORM = "application/x-www-form-urlencoded"
NUM_WORKERS = 2

# Mostly valid values, so that sequences reach deep states (every step time known, workers ready), with
# out-of-range and malformed ones mixed in.
ranks = st.sampled_from([0, 1, 0, 1, 0, 1, -1, NUM_WORKERS])
step_times = st.sampled_from([0.05, 0.1, 0.2, 0.4] * 4 + [0, -1, "nan", "inf", "x", ""])
clock_readings = st.sampled_from([1.7e9, 0.0] * 4 + [-1, "nan", ""])
applies = st.fixed_dictionaries({"path": st.just("/apply/"), "r": ranks, "k": st.integers(-1, 3), "c": step_times,
                                  "te": clock_readings})
requests = st.one_of(
    applies, applies, applies,
    st.fixed_dictionaries({"path": st.just("/reset/"), "r": ranks, "t": st.integers(-1, 50), "te": clock_readings}),
    st.fixed_dictionaries({"path": st.just("/plan/"), "r": ranks, "c": step_times}),
    st.fixed_dictionaries({"path": st.just("/init/"), "num_workers": st.just(NUM_WORKERS),
                           "epsilon": st.sampled_from(["", "0", "0.01", "-1"])}),
)


def post(client, request):
    fields = {k: v for k, v in request.items() if k != "path" and v != ""}
    return client.post(request["path"], urlencode(fields), content_type=FORM)


@hypothesis_settings(max_examples=200, derandomize=True, database=None, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(requests, min_size=10, max_size=40))
def test_random_request_sequences_keep_the_state_consistent(sequence):
    client = Client()
    resets = {}
    with mock.patch.object(views, "COORDINATOR", Coordinator()):
        assert client.post("/init/", urlencode({"num_workers": NUM_WORKERS}), content_type=FORM).status_code == 200
        for request in sequence:
            response = post(client, request)

            assert response.status_code in {200, 400}, (request, response.content)
            answer = json.loads(response.content)
            if response.status_code == 200 and request["path"] == "/apply/" and request["k"] == 0:
                assert answer == {"ready": 0}
            if response.status_code == 200 and request["path"] == "/reset/":
                resets[request["r"]] = request["t"]
            if response.status_code == 200 and request["path"] == "/init/":
                resets = {}
            if response.status_code == 200 and request["path"] == "/plan/":
                assert answer["k"] >= 1

            state = client.get("/").json()
            assert state["num_workers"] == NUM_WORKERS
            assert [w["rank"] for w in state["workers"]] == list(range(NUM_WORKERS))
            for worker in state["workers"]:
                assert worker["t"] == resets.get(worker["rank"], 0)
                assert worker["k"] >= 0 and (worker["c"] is None or worker["c"] > 0)
                assert not (worker["ready"] and worker["k"] == 0)
