"""Ends a worker that waits forever on the cluster.

A synchronous ps-lite job blocks for good when one of its processes dies: a push, a pull or a barrier simply
never returns. The training loop marks each phase that waits on another process; when one lasts longer than the
timeout, the watchdog logs which phase it was and ends the process (the waiting thread is stuck inside MXNet and
cannot be interrupted from Python).
"""
import contextlib
import logging
import os
import sys
import threading
import time

log = logging.getLogger("watchdog")

EXIT_SYNC_TIMEOUT = 3


class Watchdog:
    """`with watchdog.guard("aggregation of global iteration 12"): ...` ends the process if the block outlasts
    the timeout. Without a timeout (a worker with no cluster) guards cost nothing."""

    def __init__(self, timeout=None):
        self.timeout = timeout
        self._phase = None
        self._since = 0.0
        if timeout:
            threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    @contextlib.contextmanager
    def guard(self, phase):
        self._since = time.monotonic()
        self._phase = phase
        try:
            yield
        finally:
            self._phase = None

    def expire(self, phase=None):
        """End the process: `phase` (default: the one in progress) waited too long. The watch thread calls this,
        and so does a wait that bounds itself (an MPI collective)."""
        phase = phase or self._phase or "a wait on the other workers"
        give_up(f"no answer for {self.timeout:.0f} s during {phase}: another process of the job has probably died "
                "(raise --sync-timeout if it is only slow)")

    def _watch(self):
        while True:
            time.sleep(min(1.0, self.timeout / 10))
            phase = self._phase
            if phase is not None and time.monotonic() - self._since > self.timeout:
                self.expire(phase)


def give_up(reason):
    """Log why this worker stops waiting and end it at once (its peers' waits end them in turn)."""
    log.error("%s; exiting", reason)
    sys.stderr.flush()
    os._exit(EXIT_SYNC_TIMEOUT)
