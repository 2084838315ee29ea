"""The state server as a real cluster's transport hands it to a scheme (`transport.coordination`): clients over HTTP
(coordination/client.py), ESync's requests on a thread of their own beside its steps, and NBSSGD's arrivals with
their long-polls. On the virtual clock the transport hands the in-process one instead (training/clocks/coordination.py),
which answers the same calls: no scheme asks which it has."""
import concurrent.futures

from training.faults import watchdog


class RemoteCoordination:
    """The job's state server at `address` (host, port), each wait on it bounded by `sync_timeout` seconds."""

    def __init__(self, address, sync_timeout):
        self.address, self.sync_timeout = address, sync_timeout
        self._executor = None

    @property
    def executor(self):
        """Where a scheme sends the requests that fly beside its steps (made on first use: most schemes send none)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="state-requests")
        return self._executor

    def client(self, rank, on_not_initialised=None):
        """A client of worker `rank`; `on_not_initialised()` sets the job up again on a restarted server."""
        from coordination.client import StateClient  # on first use: http.client costs the workers that ask none 20 ms

        return StateClient(*self.address, retry_for=self.sync_timeout, on_not_initialised=on_not_initialised)

    def arrivals(self, rank, num_workers, policy):
        """NBSSGD's arrivals of worker `rank` (`policy`: the rounds' rule, which Arrivals names itself)."""
        from coordination.rules.nbsync import Arrivals

        return Arrivals(self.address, rank, num_workers, self.sync_timeout, watchdog.give_up)
