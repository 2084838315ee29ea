"""ESync's non-blocking mode with delayed ACK (the paper's section 4.2): after every local step the worker sends the
apply rule's question and goes on training without waiting for the answer, reporting as its step time the step plus
the questions' round trip; when READY arrives during a step, that step is abandoned (its gradient is not applied)
and the round ends with the steps before it. The state server answers the question as the apply rule."""
import time

from coordination.rules.apply import Asking, log
from coordination.rules.base import Rule
from coordination.protocol import StateServerUnavailable
from coordination.records import smoothed

NAME = "nonblocking"


class AskingWithoutWaiting(Asking):
    in_flight = True
    def __init__(self, esync):
        super().__init__(esync)
        self.questions = []  # the questions in flight: (answer future, when it was sent)
        self.round_trip = 0.0

    def round_done(self, steps, opened):
        return self.answered_ready() or self.ask_without_waiting(steps)

    def abandons_step(self):
        return self.answered_ready()

    def answered_ready(self):
        """Whether an answer that has come says READY (False while they travel, or when they said go on). The
        questions still in flight after a READY are dropped: they ask about the same round, and the /reset/ that
        opens the next one goes after them."""

        while self.questions and self.questions[0][0].done():
            answer, sent = self.questions.pop(0)
            self.round_trip = smoothed(self.round_trip, time.perf_counter() - sent)
            try:
                ready = answer.result()
            except StateServerUnavailable as err:
                log.warning("%s: ending this round here", err)
                ready = True
            if ready:
                self.questions = []
                return True
        return False

    def ask_without_waiting(self, steps):
        """Send the question for `steps` and go on: never ready at once. The step time it reports counts the round
        trip, since the answer comes that much later."""
        esync = self.esync
        self.questions.append((esync.requests.submit(esync.client.apply, esync.rank, steps,
                                                     esync.step_seconds + self.round_trip, time.time(), retry_for=0),
                               time.perf_counter()))
        return False


RULE = Rule(NAME, esync=True, worker=AskingWithoutWaiting)
