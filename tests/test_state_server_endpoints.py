"""Tests of the ESync state server's /init/, /apply/, /reset/ and /plan/ endpoints through Django's test
client."""

from urllib.parse import urlencode

import pytest

from coordination import protocol
from coordination.records import MAX_PLANNED_STEPS, Settings
from tests.state_server_helpers import FORM, EndpointTestCase

pytestmark = pytest.mark.usefixtures("quiet_coordinator_console")  # tests/conftest.py


class InitEndpointTests(EndpointTestCase):
    def test_init_answers_ok_with_the_job_settings_and_its_id(self):
        response = self.post("/init/", num_workers=3, epsilon=0.25, policy="plan")
        named = self.post("/init/", num_workers=3, epsilon=0.25, policy="plan", job="run-7")

        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.json(), {"ok": 1, "num_workers": 3, "epsilon": 0.25,
                                           "policy": "plan", "margin": None, "job": "default"})
        self.assertEqual(named.json()["job"], "run-7")

    def test_init_without_epsilon_uses_the_automatic_margin(self):
        response = self.post("/init/", num_workers=2)

        self.assertEqual(response.json()["epsilon"], None)
        self.assertEqual(response.json()["policy"], "apply")

    def test_init_accepts_a_json_body(self):
        response = self.post_json("/init/", {"num_workers": 2, "epsilon": 0})

        self.assertEqual(response.json()["epsilon"], 0.0)

    def test_init_answer_is_compact_json_with_a_length(self):
        response = self.post("/init/", num_workers=1)

        self.assertNotIn(b", ", response.content)
        self.assertEqual(response["Content-Length"], str(len(response.content)))

    def test_init_logs_one_line(self):
        with self.assertLogs("coordinator", "INFO") as logs:
            self.post("/init/", num_workers=2)

        self.assertEqual(len(logs.records), 1)

    def test_init_rejects_missing_num_workers(self):
        self.assertJsonError(self.post("/init/"), 400, "num_workers")

    def test_init_rejects_bad_num_workers(self):
        for value in ["two", "1.5", "0", "-3", "100000", "nan"]:
            with self.subTest(value=value):
                self.assertJsonError(self.post("/init/", num_workers=value), 400, "num_workers")

    def test_init_rejects_bad_epsilon(self):
        for value in ["abc", "nan", "inf", "-inf", "-0.1", "1e400"]:
            with self.subTest(value=value):
                response = self.post("/init/", num_workers=2, epsilon=value)
                self.assertJsonError(response, 400, "epsilon")

    def test_init_rejects_an_unknown_policy(self):
        self.assertJsonError(self.post("/init/", num_workers=2, policy="async"), 400, "policy")

    def test_init_rejects_malformed_json(self):
        response = self.client.post("/init/", "{not json", content_type="application/json")

        self.assertJsonError(response, 400, "body")

    def test_init_rejects_a_json_body_that_is_not_an_object(self):
        self.assertJsonError(self.post_json("/init/", [2]), 400, "body")

    def test_init_rejects_json_booleans_as_numbers(self):
        self.assertJsonError(self.post_json("/init/", {"num_workers": True}), 400, "num_workers")

    def test_init_rejects_an_oversized_body(self):
        response = self.post("/init/", num_workers=2, padding="x" * 100_000)

        self.assertJsonError(response, 400, "body")

    def test_init_rejects_a_broken_multipart_body(self):
        response = self.client.post("/init/", b"garbage", content_type="multipart/form-data")

        self.assertJsonError(response, 400, "body")


class ApplyEndpointTests(EndpointTestCase):
    VALID = {"r": 0, "k": 1, "c": 0.5, "te": 1234.5}

    def apply(self, **overrides):
        return self.post("/apply/", **{**self.VALID, **overrides})

    def without(self, name):
        return {key: value for key, value in self.VALID.items() if key != name}

    def test_apply_before_init_is_409(self):
        self.assertJsonError(self.apply(), 409)

    def test_slowest_worker_is_told_ready(self):
        self.init(2, epsilon=0.0)
        self.apply(r=1, c=0.1)

        response = self.apply(r=0, c=1.0)

        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.json(), {"ready": 1})

    def test_fast_worker_is_told_to_keep_stepping(self):
        self.init(2, epsilon=0.0)
        self.apply(r=0, k=0, c=1.0)  # the slowest, known, in its step

        response = self.apply(r=1, c=0.1)

        self.assertEqual(response.json(), {"ready": 0})

    def test_apply_accepts_a_json_body(self):
        self.init(1)

        response = self.post_json("/apply/", self.VALID)

        self.assertEqual(response.json(), {"ready": 1})

    def test_apply_accepts_the_path_without_trailing_slash(self):
        self.init(1)

        response = self.client.post("/apply", urlencode(self.VALID), content_type=FORM)

        self.assertEqual(response.json(), {"ready": 1})

    def test_apply_with_zero_steps_may_report_zero_step_time(self):
        self.init(1)

        response = self.apply(k=0, c=0)

        self.assertEqual(response.json(), {"ready": 0})

    def test_apply_does_not_log(self):
        self.init(1)

        with self.assertNoLogs("coordinator", "DEBUG"):
            self.apply()

    def test_apply_rejects_each_missing_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                response = self.post("/apply/", **self.without(name))
                self.assertJsonError(response, 400, name)

    def test_apply_rejects_each_non_numeric_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                self.assertJsonError(self.apply(**{name: "abc"}), 400, name)

    def test_apply_rejects_each_nan_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                self.assertJsonError(self.apply(**{name: "nan"}), 400, name)

    def test_apply_rejects_each_infinite_field(self):
        self.init(2)
        for name in self.VALID:
            for value in ["inf", "-inf", "1e999"]:
                with self.subTest(field=name, value=value):
                    self.assertJsonError(self.apply(**{name: value}), 400, name)

    def test_apply_rejects_negative_rank_steps_and_step_time(self):
        self.init(2)
        for name in ["r", "k", "c"]:
            with self.subTest(field=name):
                self.assertJsonError(self.apply(**{name: -1}), 400, name)

    def test_apply_rejects_zero_step_time_after_steps(self):
        self.init(2)

        self.assertJsonError(self.apply(k=3, c=0), 400, "c")

    def test_apply_rejects_a_rank_out_of_range(self):
        self.init(2)

        self.assertJsonError(self.apply(r=2), 400, "r")

    def test_apply_rejects_a_huge_rank(self):
        self.init(2)

        self.assertJsonError(self.apply(r=10**30), 400, "r")

    def test_get_on_apply_is_405_json(self):
        response = self.client.get("/apply/")

        self.assertJsonError(response, 405)
        self.assertEqual(response["Allow"], "POST")


class ResetEndpointTests(EndpointTestCase):
    VALID = {"r": 1, "t": 1, "te": 99.0}

    def test_reset_before_init_is_409(self):
        self.assertJsonError(self.post("/reset/", **self.VALID), 409)

    def test_reset_starts_the_next_round(self):
        self.init(2, epsilon=0.0)
        self.post("/apply/", r=1, k=1, c=2.0, te=0)

        response = self.post("/reset/", **self.VALID)

        self.assertEqual(response.json(), {"ok": 1})
        record = self.client.get("/").json()["workers"][1]
        self.assertEqual((record["k"], record["ready"], record["t"]), (0, False, 1))

    def test_reset_rejects_each_missing_field(self):
        self.init(2)
        for name in self.VALID:
            with self.subTest(field=name):
                fields = {key: value for key, value in self.VALID.items() if key != name}
                self.assertJsonError(self.post("/reset/", **fields), 400, name)

    def test_reset_rejects_each_bad_value(self):
        self.init(2)
        for name in self.VALID:
            for value in ["x", "nan", "inf"]:
                with self.subTest(field=name, value=value):
                    response = self.post("/reset/", **{**self.VALID, name: value})
                    self.assertJsonError(response, 400, name)

    def test_reset_rejects_a_negative_iteration(self):
        self.init(2)

        self.assertJsonError(self.post("/reset/", **{**self.VALID, "t": -1}), 400, "t")

    def test_reset_rejects_a_rank_out_of_range(self):
        self.init(2)

        self.assertJsonError(self.post("/reset/", **{**self.VALID, "r": 5}), 400, "r")

    def test_get_on_reset_is_405_json(self):
        self.assertJsonError(self.client.get("/reset/"), 405)


class PlanEndpointTests(EndpointTestCase):
    def test_plan_before_init_is_409(self):
        self.assertJsonError(self.post("/plan/", r=0, c=0.1), 409)

    def test_plan_is_one_step_while_a_step_time_is_unknown(self):
        self.init(2, policy="plan")

        self.assertEqual(self.post("/plan/", r=0, c=0.1).json(), {"k": 1})

    def test_plan_gives_a_four_times_faster_worker_four_steps(self):
        self.init(2, epsilon=0.0, policy="plan")
        self.post("/plan/", r=0, c=0.8)

        response = self.post("/plan/", r=1, c=0.2)

        self.assertEqual(response.json(), {"k": 4})

    def test_plan_for_extreme_step_times_is_bounded(self):
        self.init(2, epsilon=protocol.MAX_SECONDS)
        self.post("/plan/", r=0, c=protocol.MAX_SECONDS)

        response = self.post("/plan/", r=1, c=5e-324)

        self.assertEqual(response.json(), {"k": MAX_PLANNED_STEPS})

    def test_a_step_time_no_job_can_have_is_refused_and_changes_nothing(self):
        self.init(2, policy="plan")
        self.post("/plan/", r=0, c=0.5)
        before = self.client.get("/").json()

        for c in (1e12, 1.7e308):
            self.assertJsonError(self.post("/plan/", r=1, c=c), 400, "c")
        self.assertEqual(self.client.get("/").json(), before)

    def test_plan_rejects_zero_step_time(self):
        self.init(2)

        self.assertJsonError(self.post("/plan/", r=0, c=0), 400, "c")

    def test_plan_rejects_each_bad_value(self):
        self.init(2)
        for name in ["r", "c"]:
            for value in ["", "x", "nan", "inf", "-1"]:
                with self.subTest(field=name, value=value):
                    fields = {"r": 0, "c": 0.1, name: value}
                    self.assertJsonError(self.post("/plan/", **fields), 400, name)

    def test_adaptive_plan_takes_the_aggregation_time_and_says_how_it_sized_the_round(self):
        self.init(2, epsilon=0.0, policy="adaptive", share=0.5, max_slowest_steps=4)
        self.post("/plan/", r=0, c=0.2, a=0.5)  # T >= 0.5 s: 3 steps of 0.2 s

        plan = self.post("/plan/", r=1, c=0.1, a=0.9).json()

        self.assertAlmostEqual(plan.pop("seconds"), 0.6)
        self.assertEqual(plan, {"k": 6, "slowest_steps": 3, "aggregation": 0.5, "reason": "aggregation"})

    def test_the_plan_policy_ignores_the_aggregation_time(self):
        self.init(2, epsilon=0.0, policy="plan")
        self.post("/plan/", r=0, c=0.2, a=5.0)

        self.assertEqual(self.post("/plan/", r=1, c=0.1, a=5.0).json(), {"k": 2})

    def test_init_of_an_adaptive_job_answers_its_sizing(self):
        response = self.post("/init/", num_workers=2, policy="adaptive", overlap=1)

        self.assertEqual(response.json()["share"], Settings().share)
        self.assertEqual(response.json()["max_slowest_steps"], Settings().max_slowest_steps)
        self.assertIs(response.json()["overlap"], True)

    def test_init_rejects_bad_sizing(self):
        for name, value in [("share", "0"), ("share", "1.5"), ("share", "x"), ("max_slowest_steps", "0"),
                            ("max_slowest_steps", "2.5"), ("overlap", "2")]:
            with self.subTest(field=name, value=value):
                self.assertJsonError(self.post("/init/", num_workers=2, policy="adaptive", **{name: value}), 400, name)

    def test_plan_rejects_a_bad_aggregation_time(self):
        self.init(2, policy="adaptive")
        for value in ["x", "nan", "inf", "-1"]:
            with self.subTest(value=value):
                self.assertJsonError(self.post("/plan/", r=0, c=0.1, a=value), 400, "a")

    def test_get_on_plan_is_405_json(self):
        self.assertJsonError(self.client.get("/plan/"), 405)
