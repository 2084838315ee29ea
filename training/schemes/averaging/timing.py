"""When a round's average reaches the workers: at once, the workers waiting for it (the plain aggregation), or a round
late, while they run the next round's local steps (--overlap, delayed averaging as overlap local SGD).

A timing is given the averaging it serves (training/schemes/local_sgd.py DeltaAveraging) and answers for what
differs between the two: the aggregation at the end of a round, what the workers wait for before the next one,
which arrays every worker holds identically, what a round logs of it, and what is left in flight at the end. Where
it changes nothing it calls `default`, the averaging's own behaviour.
"""
from training import runlog


def delayed_average(weights, start, sent, move):
    """Apply a move of the global model that arrived a round late, in place (numpy or MXNet arrays alike):
        start   += move           the global model W moves (its outer optimizer's step for the deltas sent)
        weights += move - sent    W plus this worker's progress since it sent `sent` (= weights - start then)"""
    start += move
    weights += move - sent


class AtOnce:
    """Every round sums its deltas and starts the next from the new global model."""
    overlaps = False

    def __init__(self, averaging):
        self.averaging = averaging

    def aggregate(self, stop_vote):
        return self.averaging.aggregate_now(stop_vote)

    def settle(self, default):
        return default()

    def global_arrays(self, default):
        return default()

    def record(self, record):
        """Nothing of its own in the round's log."""

    def finish(self):
        """Nothing in flight."""


class Overlapped(AtOnce):
    """A worker sends its round's delta and goes on with the next round's local steps while the sum travels; at the
    end of that round it applies the average, keeping the progress made meanwhile (delayed_average), and sends that
    progress. W, the global model, is then the same on every worker after each applied average; a worker's weights
    are W plus its own steps since it sent. When any worker votes to stop, every worker learns it from that round's
    average, at the end of the next round, and all end there with one blocking aggregation of what is left: they
    stop with identical weights, one round after the stop condition."""
    overlaps = True

    def __init__(self, averaging):
        super().__init__(averaging)
        self.pending = None            # the sum in flight
        self.applied_in_flight = None  # how long the average applied this round travelled
        self.sent = averaging.zeros_like_weights()  # the delta in flight, as it was sent

    def aggregate(self, stop_vote):
        averaging = self.averaging
        arrived_statistics = None
        if self.pending is not None:
            arrived_statistics = self.apply_arrived()
            if averaging.stop_requested():
                return averaging.aggregate_now(True)
        # A vote to stop travels with this round's delta: the voter trains one more round like everyone else, since
        # under the apply policy the others' round would wait for it to step (a stopped slowest never gets there).
        averaging.fill_buffers(stop_vote, keep=self.sent)
        self.pending = averaging.transport.start_sum(averaging.sum_keys, averaging.buffers)
        if arrived_statistics is not None:
            averaging.stats.scatter(1.0 / averaging.num_workers, source=arrived_statistics)
        return False

    def apply_arrived(self):
        """Wait for the sum in flight and apply it (delayed_average); the summed BatchNorm statistics it brought
        (a copy, or None), to be set once this round's own have been sent."""
        averaging = self.averaging
        pending, self.pending = self.pending, None
        pending.wait()
        self.applied_in_flight = pending.seconds
        averaging.observe_aggregation(pending.seconds)
        for p, move, starts, sent in zip(averaging.model.trainable, averaging.global_moves(), averaging.start,
                                         self.sent):
            for data, start in zip(p.list_data(), starts):
                delayed_average(data, start, sent.as_in_context(start.context), move.as_in_context(start.context))
        return averaging.stats.buffer.copy() if averaging.stats else None

    def settle(self, default):
        """Wait for the weights only: a sum is still in flight, and waiting for it would undo the overlap."""
        for p in self.averaging.model.trainable:
            for data in p.list_data():
                data.wait_to_read()

    def global_arrays(self, default):
        """The global model W (the same on every worker), not the weights (W plus this worker's progress since it
        sent)."""
        averaging = self.averaging
        return [starts[0] for starts in averaging.start] + [p.data(averaging.model.ctxs[0])
                                                            for p in averaging.model.aux]

    def record(self, record):
        """How long the average applied this round travelled (the round's aggregation phase is only the part of it
        the worker waited for)."""
        if self.applied_in_flight is not None:
            record[runlog.AVERAGE_IN_FLIGHT] = self.applied_in_flight
            self.applied_in_flight = None

    def finish(self):
        if self.pending is not None:  # training ended by a failure: nothing will apply it
            self.pending.abandon()
            self.pending = None


def timing(averaging):
    """The timing --overlap chooses for `averaging`."""
    return (Overlapped if averaging.options.overlap else AtOnce)(averaging)
