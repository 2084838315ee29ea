"""Several jobs on one state server, each by its id: every request answered under its own job's policy, a request
for a rank its named job does not have refused with 409, a request without its job's own secret with 403, and a new
job where every kept one is live with 503."""
from coordination import state
from tests.state_server_helpers import FORM, EndpointTestCase


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

    def test_a_new_job_beyond_the_limit_drops_the_one_idle_longest_past_its_liveness(self):
        self.post("/init/", num_workers=2, job="short", liveness=5)
        for n in range(state.MAX_JOBS - 3):
            self.post("/init/", num_workers=2, job=f"new-{n}")
        self.clock.advance(10)  # "short" has gone its 5 s without a request; the others are within their 600 s
        self.post("/apply/", r=0, k=1, c=0.1, te=1.0, job="a")

        response = self.post("/init/", num_workers=2, job="one-more")
        jobs = self.client.get("/").json()["jobs"]

        self.assertEqual(response.status_code, 200)
        self.assertEqual(len(jobs), state.MAX_JOBS)
        self.assertNotIn("short", jobs)
        self.assertIn("b", jobs)  # idle longer, but within its liveness window

    def test_a_new_job_where_every_kept_one_is_live_is_refused_with_503_and_drops_none(self):
        for n in range(state.MAX_JOBS - 2):
            self.post("/init/", num_workers=2, job=f"new-{n}")
        before = sorted(self.client.get("/").json()["jobs"])

        response = self.post("/init/", num_workers=2, job="seventeenth")

        self.assertJsonError(response, 503)
        self.assertIn("each with a request within its liveness window", response.json()["error"])
        self.assertEqual(sorted(self.client.get("/").json()["jobs"]), before)


class JobSecretTests(EndpointTestCase):
    SECRET = {"HTTP_X_ESYNC_JOB_SECRET": "its-own"}

    def setUp(self):
        super().setUp()
        self.assertEqual(self.client.post("/init/", "num_workers=2&job=mine", content_type=FORM,
                                          **self.SECRET).status_code, 200)

    def test_a_request_without_the_jobs_secret_is_refused_with_403_and_changes_nothing(self):
        for headers in ({}, {"HTTP_X_ESYNC_JOB_SECRET": "another"}):
            applied = self.client.post("/apply/", "r=0&k=1&c=0.1&te=1&job=mine", content_type=FORM, **headers)
            again = self.client.post("/init/", "num_workers=4&job=mine", content_type=FORM, **headers)
            self.assertJsonError(applied, 403)
            self.assertJsonError(again, 403)
        self.assertEqual(self.client.get("/", {"job": "mine"}, **self.SECRET).json()["num_workers"], 2)

    def test_the_jobs_own_requests_carry_its_secret_and_are_answered(self):
        applied = self.client.post("/apply/", "r=0&k=1&c=0.1&te=1&job=mine", content_type=FORM, **self.SECRET)

        self.assertEqual(applied.status_code, 200)
        self.assertEqual(set(applied.json()), {"ready"})
