"""ESync's rule as the paper states it (Algorithm 2): a worker asks after every local step whether to stop, and the
state server answers READY when it is the slowest, when the slowest is ready, or when its next step would end after
the slowest worker's (records.is_ready). A round opens with /reset/ (sent while its first step runs)."""
import logging

from coordination.rules.base import Rule, Worker
from coordination.protocol import StateServerUnavailable

NAME = "apply"
log = logging.getLogger("esync")


class Asking(Worker):
    def begin_round(self, completed):
        esync = self.esync
        if completed > 0:
            esync.opening = esync.requests.submit(esync.client.reset, esync.rank, completed, esync.clock.now())

    def round_done(self, steps, opened):
        # No retries: another worker may already wait in the aggregation, for this one.
        esync = self.esync
        try:
            return esync.client.apply(esync.rank, steps, esync.step_seconds, esync.clock.now(), retry_for=0)
        except StateServerUnavailable as err:
            log.warning("%s: ending this round here", err)
            return True


RULE = Rule(NAME, esync=True, worker=Asking)
