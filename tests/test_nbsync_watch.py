"""NBSSGD's watcher thread (coordination/rules/nbsync.py: what it asks the state server, and when it stops), against a scripted client: the case
of a state server that restarted and lost what it had been told."""
import threading

from coordination.rules.nbsync import Arrivals, RoundWatch


class LostArrivalServer:
    """A restarted state server that has not heard this worker's arrival: the round never finishes for a worker that
    does not say it arrived; it gathers once the worker says so."""

    def __init__(self):
        self.requests = []

    def watch(self, rank, t, arrived, wait, still_wanted=None):
        self.requests.append((t, arrived))
        return {"finished": arrived, "gathered": arrived}


def watcher(client, sync_timeout=30.0):
    """Worker 1's side with `client` as its long-polling client (no connection of its own)."""
    arrivals = object.__new__(Arrivals)
    arrivals.rank, arrivals.watch_client, arrivals.sync_timeout = 1, client, sync_timeout
    return arrivals


def run_watch(arrivals, watch, timeout=10.0):
    thread = threading.Thread(target=Arrivals._watch, args=(arrivals, watch), daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


def test_a_worker_that_arrived_repeats_its_arrival_to_a_server_that_lost_it():
    server = LostArrivalServer()
    watch = RoundWatch(7)
    watch.arrived.set()  # the training thread arrived; the server's answer to the watcher was lost in the restart

    assert run_watch(watcher(server), watch)

    assert watch.gathered.is_set()
    assert server.requests[-1] == (7, True)


def test_a_round_the_training_thread_knows_is_over_is_never_asked_about():
    server = LostArrivalServer()
    watch = RoundWatch(7)
    watch.arrived.set()
    watch.gathered.set()  # the training thread learned it from its own arrival and went on

    assert run_watch(watcher(server), watch)

    assert server.requests == []


def test_a_request_being_retried_is_dropped_once_the_round_is_over():
    watch = RoundWatch(7)
    wanted_after_the_round = []

    class RestartingServer:
        def watch(self, rank, t, arrived, wait, still_wanted=None):
            watch.arrived.set()
            watch.gathered.set()  # meanwhile the training thread was told "gathered"
            wanted_after_the_round.append(still_wanted())
            return None  # what the client returns when it drops the request

    assert run_watch(watcher(RestartingServer()), watch)

    assert wanted_after_the_round == [False]
