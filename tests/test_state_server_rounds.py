"""Tests of the ESync state server's rounds: NBSSGD's /arrive/ and long-polled /watch/, and SSGD with backup
workers."""

import threading
import time

import pytest

from coordination.state import Coordinator
from tests.state_server_helpers import EndpointTestCase

pytestmark = pytest.mark.usefixtures("quiet_coordinator_console")  # tests/conftest.py


class RoundEndpointTests(EndpointTestCase):
    """NBSSGD: /arrive/ and the long-polled /watch/."""

    def test_arrive_before_init_is_409(self):
        self.assertJsonError(self.post("/arrive/", r=0, t=0), 409)

    def test_the_first_arrival_finishes_the_round_and_the_last_gathers_it(self):
        self.init(3, policy="nbsync")

        answers = [self.post("/arrive/", r=rank, t=5).json() for rank in (1, 0, 2)]

        self.assertEqual(answers, [{"finished": True, "gathered": False}, {"finished": True, "gathered": False},
                                   {"finished": True, "gathered": True}])

    def test_a_repeated_arrival_counts_once(self):
        self.init(2, policy="nbsync")
        self.post("/arrive/", r=0, t=0)

        self.assertEqual(self.post("/arrive/", r=0, t=0).json()["gathered"], False)

    def test_rounds_are_independent(self):
        self.init(2, policy="nbsync")
        self.post("/arrive/", r=0, t=0)
        self.post("/arrive/", r=1, t=0)

        self.assertEqual(self.post("/watch/", r=0, t=1, arrived=0, wait=0).json(),
                         {"finished": False, "gathered": False})

    def test_watch_answers_after_its_wait_when_nothing_happens(self):
        self.init(2, policy="nbsync")

        response = self.post("/watch/", r=0, t=0, arrived=0, wait=0.01)

        self.assertEqual(response.json(), {"finished": False, "gathered": False})

    def test_an_arrived_watch_repeats_the_arrival_for_a_restarted_server(self):
        self.init(2, policy="nbsync")
        self.post("/arrive/", r=0, t=3)
        self.init(2, policy="nbsync")  # what rank 0 does after a restart

        self.post("/watch/", r=0, t=3, arrived=1, wait=0)

        self.assertEqual(self.post("/arrive/", r=1, t=3).json()["gathered"], True)

    def test_a_resumed_job_counts_the_round_in_progress_as_gathered_once_anyone_arrived(self):
        # Rank 0 was told "gathered" just before the restart and waits in the aggregation; it will not arrive again.
        self.init(3, policy="nbsync", resumed=1)

        first = self.post("/watch/", r=1, t=7, arrived=1, wait=0).json()
        later = self.post("/arrive/", r=2, t=8).json()

        self.assertEqual(first, {"finished": True, "gathered": True})
        self.assertEqual(later, {"finished": True, "gathered": False})

    def test_a_new_job_waits_for_every_arrival_in_its_first_round(self):
        self.init(3, policy="nbsync")

        self.assertEqual(self.post("/arrive/", r=1, t=0).json(), {"finished": True, "gathered": False})

    def test_resumed_must_be_0_or_1(self):
        for value in ["2", "x", "-1"]:
            with self.subTest(value=value):
                self.assertJsonError(self.post("/init/", num_workers=2, resumed=value), 400, "resumed")

    def test_old_rounds_count_as_gathered(self):
        self.init(2, policy="nbsync")
        for t in range(10):
            self.post("/arrive/", r=0, t=t)

        self.assertEqual(self.post("/watch/", r=1, t=0, arrived=0, wait=0).json(),
                         {"finished": True, "gathered": True})
        self.assertLessEqual(len(self.client.get("/").json()["rounds"]), 4)

    def test_round_requests_reject_bad_values(self):
        self.init(2, policy="nbsync")
        cases = [("/arrive/", "r", "2"), ("/arrive/", "t", "-1"), ("/arrive/", "t", "x"),
                 ("/watch/", "arrived", "2"), ("/watch/", "wait", "-1"), ("/watch/", "wait", "nan")]
        for path, name, value in cases:
            with self.subTest(path=path, field=name, value=value):
                fields = {"r": 0, "t": 0, "arrived": 0, "wait": 0, name: value}
                self.assertJsonError(self.post(path, **fields), 400, name)

    def test_get_on_round_endpoints_is_405_json(self):
        for path in ("/arrive/", "/watch/"):
            self.assertJsonError(self.client.get(path), 405)


def test_a_long_poll_wakes_up_when_the_round_finishes_and_when_it_gathers():
    coordinator = Coordinator()
    coordinator.init(2, policy="nbsync")
    answers = []

    def watch(arrived):
        answers.append(coordinator.watch(1, 0, arrived, wait=10.0))

    watcher = threading.Thread(target=watch, args=(False,))
    watcher.start()
    coordinator.arrive(0, 0)
    watcher.join(5)
    watcher = threading.Thread(target=watch, args=(True,))
    watcher.start()
    watcher.join(5)

    assert answers == [{"finished": True, "gathered": False}, {"finished": True, "gathered": True}]


def test_a_long_poll_of_a_worker_still_missing_waits_its_full_time():
    coordinator = Coordinator()
    coordinator.init(3, policy="nbsync")
    coordinator.arrive(0, 0)

    started = time.monotonic()
    answer = coordinator.watch(1, 0, True, wait=0.2)

    assert answer == {"finished": True, "gathered": False}
    assert time.monotonic() - started >= 0.2


class BackupEndpointTests(EndpointTestCase):
    """SSGD with backup workers: a step applies the first `accept` gradients that /arrive/, the rest are late."""

    def test_the_first_n_gradients_are_accepted_and_the_late_one_is_told_so(self):
        self.init(3, policy="backup", accept=2)

        answers = [self.post("/arrive/", r=rank, t=4).json() for rank in (2, 0, 1)]

        self.assertEqual([a["accepted"] for a in answers], [True, True, False])
        self.assertEqual([a["finished"] for a in answers], [False, True, True])
        self.assertEqual(answers[-1]["arrived"], [0, 2])

    def test_a_watch_returns_once_the_step_closes_with_whose_gradients_it_holds(self):
        self.init(3, policy="backup", accept=2)
        self.post("/arrive/", r=1, t=0)
        open_ = self.post("/watch/", r=2, t=0, arrived=0, wait=0).json()
        self.post("/arrive/", r=0, t=0)

        closed = self.post("/watch/", r=2, t=0, arrived=0, wait=0).json()

        self.assertEqual(open_, {"finished": False, "gathered": False, "arrived": [1]})
        self.assertEqual(closed, {"finished": True, "gathered": True, "arrived": [0, 1]})

    def test_a_repeated_arrival_counts_once_and_stays_accepted(self):
        self.init(3, policy="backup", accept=2)
        self.post("/arrive/", r=0, t=0)

        again = self.post("/arrive/", r=0, t=0).json()

        self.assertEqual((again["accepted"], again["finished"]), (True, False))

    def test_a_gradient_of_a_step_long_closed_is_late(self):
        self.init(2, policy="backup", accept=1)
        for t in range(10):
            self.post("/arrive/", r=0, t=t)

        answer = self.post("/arrive/", r=1, t=2).json()

        self.assertEqual((answer["accepted"], answer["finished"]), (False, True))

    def test_accept_must_be_given_and_at_most_the_workers(self):
        for fields in [{}, {"accept": 4}, {"accept": 0}, {"accept": "x"}]:
            with self.subTest(fields=fields):
                self.assertJsonError(self.post("/init/", num_workers=3, policy="backup", **fields), 400, "accept")

