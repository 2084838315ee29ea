"""TiFL (Chai et al., "TiFL: A Tier-based Federated Learning System", HPDC 2020), one of the ESync journal version's
baselines: the workers are grouped into --tiers tiers by their measured step times, and each round one tier trains
(--sync-interval local SGD steps, lr -ll) while the others sit it out; the round's average is over the tier's
models, so a round lasts as long as that tier's slowest worker. The first --tier-interval rounds are everyone's:
TiFL's profiling, which measures every worker's step time (the median of its recent steps).

The tier of each round is TiFL's adaptive choice: every --tier-interval rounds each worker tests the global model
on a sample of its own share, a tier's accuracy is its workers' mean, and the tiers are ranked so that the least
accurate is the likeliest to be chosen (probabilities T, T - 1, ..., 1 over their sum, tier_probabilities); a tier
that has used its --tier-credits rounds is not chosen again. Everything the choice needs travels in the round's own
sum (each worker writes its step time and accuracy into its own slots of the control array), and every worker draws
from the same seeded generator, so all choose the same tier without asking anyone. A worker sitting a round out
takes no local step and adds a zero delta to the sum (its round is logged with runlog.SAT_OUT); the tiers are made
again every --tier-interval rounds from the latest times (a worker that sat out keeps its last one).
"""
import collections
import statistics
from typing import Optional

from training import argtypes, runlog
from training.lazy import mx, np
from training.options import ModeError, declaration, fixed, option, sync_interval
from training.schemes.base import FixedLocalSteps
from training.schemes.local_sgd import DeltaAveraging, LocalSGDOptions

FIXED = 2                 # control slots before the step times and accuracies: [stop votes, workers who trained]
TIER_TEST_SAMPLES = 256   # of a worker's share, the samples it tests the global model on
RECENT_STEPS = 21         # a worker's step time is the median of its last ones


def make_tiers(step_seconds, count):
    """The ranks in `count` tiers of (nearly) equal size, fastest first, by their step times (ties by rank)."""
    order = sorted(range(len(step_seconds)), key=lambda rank: (step_seconds[rank], rank))
    return [sorted(int(rank) for rank in tier) for tier in np.array_split(order, count)]


def tier_probabilities(accuracies):
    """TiFL's adaptive probabilities: the tiers ranked by accuracy, the least accurate weighted T, the next T - 1,
    ..., the most accurate 1 (ties by tier index), over their sum."""
    count = len(accuracies)
    order = sorted(range(count), key=lambda tier: (accuracies[tier], tier))
    weights = [0] * count
    for position, tier in enumerate(order):
        weights[tier] = count - position
    return [weight / sum(weights) for weight in weights]


def choose_tier(probabilities, credits, rng):
    """A tier drawn by `probabilities` among those with credits left (None: unlimited); -1 when none has any."""
    allowed = [p if credits is None or credits[tier] > 0 else 0.0 for tier, p in enumerate(probabilities)]
    if not sum(allowed):
        return -1
    return int(rng.choice(len(allowed), p=np.array(allowed) / sum(allowed)))


@declaration
class TiFLOptions(LocalSGDOptions):
    sync_interval: int = sync_interval()
    tiers: int = option("--tiers", default=2, type=argtypes.POSITIVE_INT,
                        help="group the workers into this many tiers by their step times; one tier trains per round "
                             "(default 2)")
    tier_interval: int = option("--tier-interval", default=10, type=argtypes.POSITIVE_INT,
                                help="every this many rounds, make the tiers again and weigh them by their accuracy "
                                     "(default 10)")
    tier_credits: Optional[int] = option("--tier-credits", type=argtypes.POSITIVE_INT,
                                         help="rounds each tier may train in (default: no limit)")
    # Delta averaging's corrections and its overlap are not TiFL's.
    overlap: bool = fixed(False)
    proximal: float = fixed(0.0)
    server_momentum: float = fixed(0.0)
    normalised_averaging: bool = fixed(False)
    normalisation_power: float = fixed(1.0)
    scaffold: bool = fixed(False)
    client_momentum: float = fixed(0.0)
    drift_correction: bool = fixed(False)

    @classmethod
    def check(cls, args, num_workers):
        if args.tiers > num_workers:
            raise ModeError(f"--tiers {args.tiers} is more than the {num_workers} workers (DMLC_NUM_WORKER): a tier "
                            "needs one")


class TiFL(FixedLocalSteps, DeltaAveraging):
    name = "tifl"
    description = ("TiFL, the workers in tiers by step time; each round one tier, chosen by its accuracy, runs "
                   "--sync-interval local steps and its models are averaged, the others sit it out (dist_sync)")
    Options = TiFLOptions

    def __init__(self, options, model, transport):
        super().__init__(options, model, transport)
        self.control = mx.nd.zeros((FIXED + 2 * self.num_workers,))
        self.recent = collections.deque(maxlen=RECENT_STEPS)  # this worker's step times
        self.accuracy = 0.0            # of the global model on this worker's test sample, at the last test
        self.known_seconds = None      # every worker's step time, from the sums
        self.tiers = None
        self.probabilities = None
        self.credits = None if options.tier_credits is None else [options.tier_credits] * options.tiers
        self.rng = np.random.RandomState(options.seed)
        self.rounds = 0
        self.chosen = None             # this round's tier (None: everyone, while profiling)

    def sits_out(self):
        return self.chosen is not None and self.rank not in self.tiers[self.chosen]

    def round_done(self, steps, step_seconds):
        self.recent.append(step_seconds)
        return super().round_done(steps, step_seconds)

    def fill_buffers(self, stop_vote, keep=None):
        super().fill_buffers(stop_vote, keep)
        n = self.num_workers
        self.control[1] = 0.0 if self.sits_out() else 1.0
        self.control[FIXED + self.rank] = statistics.median(self.recent) if self.recent else 0.0
        self.control[FIXED + n + self.rank] = self.accuracy

    def averaged_workers(self):
        """The tier's workers: the others added zeros."""
        return self.control[1].asscalar()

    def aggregate(self, stop_vote):
        self.rounds += 1
        self.trained = None if self.chosen is None else self.tiers[self.chosen]
        if self.rounds % self.options.tier_interval == 0:
            self.accuracy = self.test_on_own_share()
        self.control[FIXED:] = 0.0
        stopping = super().aggregate(stop_vote)
        self.choose_next_tier(self.control.asnumpy())
        return stopping

    def test_on_own_share(self):
        images, labels = self.share
        return self.model.accuracy(images[:TIER_TEST_SAMPLES], labels[:TIER_TEST_SAMPLES])

    def choose_next_tier(self, control):
        """The same on every worker: re-tier and re-weigh every --tier-interval rounds, then draw the next tier."""
        n, count = self.num_workers, self.options.tiers
        seconds = control[FIXED:FIXED + n]
        if self.known_seconds is None:
            self.known_seconds = seconds.copy()
        self.known_seconds = np.where(seconds > 0, seconds, self.known_seconds)  # sat out: the last time known
        if self.rounds < self.options.tier_interval:
            return  # profiling: everyone trains
        if self.rounds % self.options.tier_interval == 0:
            self.tiers = make_tiers(self.known_seconds.tolist(), count)
            accuracies = control[FIXED + n:FIXED + 2 * n]
            self.probabilities = tier_probabilities([float(np.mean(accuracies[tier])) for tier in self.tiers])
        self.chosen = choose_tier(self.probabilities, self.credits, self.rng)
        if self.chosen < 0:  # every tier spent its credits: everyone trains, as while profiling
            self.chosen = None
        elif self.credits is not None:
            self.credits[self.chosen] -= 1

    def round_record(self):
        """The ranks of the tier that trained this round (None: everyone)."""
        return {**super().round_record(), runlog.TIER: self.trained}
