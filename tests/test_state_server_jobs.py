"""Several jobs on one state server, each by its id: every request answered under its own job's policy, and a
request for a rank its named job does not have refused with 409."""
from coordinator import state
from tests.state_server_helpers import EndpointTestCase


class JobsByIdentityTests(EndpointTestCase):
    def setUp(self):
        super().setUp()
        self.post("/init/", num_workers=6, policy="apply", job="a")
        self.post("/init/", num_workers=2, policy="plan", job="b")

    def test_each_job_answers_under_its_own_policy(self):
        self.post("/plan/", r=0, c=0.1, job="b")
        planned = self.post("/plan/", r=1, c=0.05, job="b").json()
        applied = self.post("/apply/", r=4, k=1, c=0.1, te=1.0, job="a").json()

        self.assertEqual(planned["k"], 2)  # twice as fast as the slowest: two steps a round
        self.assertEqual(set(applied), {"ready"})
        self.assertEqual(self.client.get("/", {"job": "a"}).json()["policy"], "apply")
        self.assertEqual(self.client.get("/", {"job": "b"}).json()["policy"], "plan")
        self.assertEqual(sorted(self.client.get("/", {"job": "b"}).json()["jobs"]), ["a", "b"])

    def test_a_request_for_a_rank_its_job_does_not_have_is_a_conflict_and_changes_nothing(self):
        before = self.client.get("/", {"job": "b"}).json()

        response = self.post("/apply/", r=4, k=1, c=0.1, te=1.0, job="b")

        self.assertJsonError(response, 409)
        self.assertEqual(response.json()["conflict"], 1)
        self.assertEqual(self.client.get("/", {"job": "b"}).json(), before)

    def test_a_job_the_server_does_not_have_is_409_for_its_workers_to_set_up_again(self):
        response = self.post("/apply/", r=0, k=1, c=0.1, te=1.0, job="c")

        self.assertJsonError(response, 409)
        self.assertNotIn("conflict", response.json())

    def test_a_new_job_beyond_the_limit_drops_the_one_idle_longest(self):
        self.post("/apply/", r=0, k=1, c=0.1, te=1.0, job="a")  # b is now the idle one
        for n in range(state.MAX_JOBS - 1):
            self.post("/init/", num_workers=2, job=f"new-{n}")

        jobs = self.client.get("/").json()["jobs"]

        self.assertEqual(len(jobs), state.MAX_JOBS)
        self.assertIn("a", jobs)
        self.assertNotIn("b", jobs)
