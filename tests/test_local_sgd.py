"""The rules of local SGD's delta averaging alone (training/schemes/local_sgd.py and its parts,
training/schemes/averaging/): delayed averaging (--overlap: a
worker sends its round's delta, steps on, and applies the average a round late keeping the progress made
meanwhile), server momentum, FedNova's normalised averaging. Real jobs that use them: tests/test_esync.py (ps-lite)
and tests/test_collectives.py (MPI's ring)."""
import types

import mxnet as mx
import numpy as np
import pytest

from training.schemes.averaging.corrections import ClientMomentum, ProximalTerm, Scaffold, corrections, \
    scaffold_change
from training.schemes.averaging.outer import OuterOptimizer
from training.schemes.averaging.weighting import (NormalisedAverage, PlainAverage, normalised_scale,
                                                  normalised_weight, step_norm, weighting)
from training import runlog
from training.schemes.averaging.timing import AtOnce, Overlapped, delayed_average, timing


def global_move(total, scale, outer=None, learning_rate=1.0):
    """The plain average's move (or `outer`'s) for the sum `total` of the deltas, as numpy."""
    outer = outer or OuterOptimizer("sgd", 0.0, [mx.nd.array(total)])
    return outer.step([mx.nd.array(total)], scale, learning_rate)[0].asnumpy()


def test_a_late_average_moves_the_global_model_and_keeps_the_progress_made_since_sending():
    start = np.array([1.0, 2.0])
    sent = np.array([0.5, -1.0])             # weights - start when the delta was sent
    weights = start + sent + [0.25, 0.25]    # then two more local steps' worth of progress
    total = sent + np.array([1.5, 1.0])      # the sum of the two workers' deltas

    delayed_average(weights, start, sent, global_move(total, 0.5))

    assert np.allclose(start, [2.0, 2.0])      # W + the average of the two deltas
    assert np.allclose(weights, [2.25, 2.25])  # the new W + the progress since sending


def test_workers_that_apply_every_average_a_round_late_share_the_global_model_of_plain_averaging():
    """Three workers, each adding its own progress every round: their global models stay identical, and equal
    the sum of every average sent so far, however the progress differed."""
    rng = np.random.default_rng(0)
    workers, size, scale = 3, 5, 1 / 3
    start = [np.zeros(size) for _ in range(workers)]
    weights = [np.zeros(size) for _ in range(workers)]
    sent = [None] * workers
    expected_global = np.zeros(size)
    in_flight = None
    for _ in range(20):
        for w in range(workers):
            weights[w] += rng.normal(size=size)  # this round's local steps
        if in_flight is not None:
            for w in range(workers):
                delayed_average(weights[w], start[w], sent[w], global_move(in_flight, scale))
            expected_global += scale * in_flight
            assert all(np.allclose(s, expected_global) for s in start)
        sent = [weights[w] - start[w] for w in range(workers)]
        in_flight = sum(sent)
    # what is in flight and each worker's last progress are the last round's: the global model trails by a round
    assert all(np.allclose(weights[w], start[w] + sent[w]) for w in range(workers))


def test_esync_variants_name_a_policy_the_overlap_and_the_drift_correction():
    from training import esync_variants

    overlapped = esync_variants.composition("adaptive-overlap")
    assert (overlapped.launcher_options(), overlapped.worker_flags()) == ({"esync_policy": "adaptive"}, ["--overlap"])
    assert esync_variants.composition("plan").worker_flags() == []
    assert esync_variants.composition("overlap") == esync_variants.Composition("adaptive", True)  # the default's
    assert esync_variants.composition("apply") == esync_variants.Composition("apply")
    assert esync_variants.describe("adaptive-overlap") == "adaptive, overlap"
    drift = esync_variants.composition("apply-drift")
    assert (drift.launcher_options(), drift.worker_flags()) == ({"esync_policy": "apply"},
                                                                esync_variants.DRIFT_CORRECTION)
    assert esync_variants.composition("plan-overlap-drift") == esync_variants.Composition("plan", True, True)
    assert esync_variants.describe("apply-drift") == "apply, drift correction"
    with pytest.raises(ValueError, match="no configuration 'greedy-overlap'"):
        esync_variants.composition("greedy-overlap")


def test_server_momentum_moves_the_global_model_by_a_velocity_of_the_averages():
    outer = OuterOptimizer("sgd", 0.9, [mx.nd.zeros(2)])
    moves = [global_move(np.array(total), 0.5, outer) for total in ([2.0, 0.0], [2.0, 0.0], [0.0, 0.0])]

    assert np.allclose(moves, [[1.0, 0.0], [1.9, 0.0], [1.71, 0.0]])  # v = 0.9 v + 0.5 x total
    assert np.allclose(global_move(np.array([2.0, 4.0]), 0.5), [1.0, 2.0])  # no momentum: the average
    assert np.allclose(global_move(np.array([2.0, 4.0]), 0.5, learning_rate=0.5), [0.5, 1.0])  # -gl scales it


def test_the_plain_average_moves_exactly_as_mxnets_sgd_update_would():
    total, scale, learning_rate = mx.nd.array([[2.0, -4.0], [0.5, 8.0]]), 1 / 3, 0.7
    sgd = mx.optimizer.create("sgd", learning_rate=learning_rate, wd=0.0, rescale_grad=-scale)
    move = mx.nd.zeros(total.shape)
    sgd.update(0, move, total, None)

    assert OuterOptimizer("sgd", 0.0, [total]).plain and not OuterOptimizer("sgd", 0.8, [total]).plain
    assert np.allclose(OuterOptimizer("sgd", 0.0, [total]).step([total], scale, learning_rate)[0].asnumpy(),
                       move.asnumpy(), rtol=0, atol=1e-7)


def test_server_momentum_over_many_parameters_moves_each_as_mxnets_update_of_that_parameter_alone():
    # more parameters than one call of the fused update takes, of different shapes, and one too large for it
    rng = np.random.default_rng(0)
    shapes = [(3,), (2, 4), (5,)] * 20 + [(400, 300)]
    rounds = [[mx.nd.array(rng.normal(size=shape)) for shape in shapes] for _ in range(3)]
    outer = OuterOptimizer("sgd", 0.8, rounds[0])
    sgd = mx.optimizer.create("sgd", momentum=0.8, learning_rate=0.5, wd=0.0, rescale_grad=-0.25)
    states = [sgd.create_state(i, total) for i, total in enumerate(rounds[0])]

    for totals in rounds:
        moves = [m.asnumpy() for m in outer.step(totals, 0.25, 0.5)]
        for index, (total, move) in enumerate(zip(totals, moves)):
            expected = mx.nd.zeros(total.shape)
            sgd.update(index, expected, total, states[index])
            assert np.allclose(move, expected.asnumpy(), rtol=1e-6, atol=1e-7), index


def test_nesterovs_outer_step_looks_ahead_by_the_momentum_and_adams_normalises_each_coordinate():
    nag = OuterOptimizer("nag", 0.9, [mx.nd.zeros(2)])
    adam = OuterOptimizer("adam", 0.0, [mx.nd.zeros(2)])

    first = global_move(np.array([2.0, 0.0]), 0.5, nag)
    second = global_move(np.array([2.0, 0.0]), 0.5, nag)

    assert np.allclose(first, [1.9, 0.0])             # the average 1, plus 0.9 x the velocity it starts
    assert np.allclose(second, [1.0 + 0.9 * 1.9, 0])  # the average, plus 0.9 x the velocity 1.9
    assert np.allclose(global_move(np.array([4.0, -0.02]), 0.5, adam, 0.1), [0.1, -0.1], atol=1e-5)


def test_fednova_weighs_every_worker_alike_however_many_steps_it_took():
    """Two workers whose every step moves by their own gradient g_i: 20 steps and 1 step. A plain average of the
    deltas is (20 g_0 + g_1) / 2, nearly all worker 0's; FedNova's, sum(delta_i / a_i) / 2 scaled by the mean a_i,
    is 10.5 (g_0 + g_1) / 2: both directions with equal weight, the length of the mean work."""
    g = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    steps = [20, 1]
    deltas = [s * gi for s, gi in zip(steps, g)]
    norms = [step_norm(s) for s in steps]

    total = sum(d / a for d, a in zip(deltas, norms))
    move = global_move(total, 1.0 / 2 * (sum(norms) / 2))

    assert np.allclose(move, [5.25, 5.25])


@pytest.mark.parametrize("power, expected", [
    (1.0, [5.25, 5.25]),                                  # FedNova: both directions alike
    (0.5, [10.5 * 20 ** 0.5 / (20 ** 0.5 + 1), 10.5 / (20 ** 0.5 + 1)]),
])
def test_a_normalisation_power_weighs_a_worker_by_its_steps_to_that_power_and_keeps_the_mean_work(power, expected):
    """The same two workers as above, each delta divided by a_i^p: worker i's direction gets weight a_i^(1 - p)
    (20^0.5 against 1 at p = 0.5, where the plain average gives 20 against 1), and the move's total length in
    steps stays the workers' mean work, 10.5, as the plain average's and FedNova's."""
    g = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    steps = [20, 1]
    divisors, complements = zip(*(normalised_weight(step_norm(s), power) for s in steps))

    total = sum(s * gi / d for s, gi, d in zip(steps, g, divisors))
    move = global_move(total, normalised_scale(sum(steps), sum(complements), workers=2))

    assert np.allclose(move, expected)
    assert move.sum() == pytest.approx(10.5)


def test_fednova_norm_counts_the_gradients_momentum_accumulated():
    # with momentum beta a step's gradient keeps acting: steps 1, 2 give 1 and 1 + (1 + beta) coefficients
    assert step_norm(1, 0.9) == pytest.approx(1.0)
    assert step_norm(2, 0.9) == pytest.approx(1.0 + 1.9)
    assert step_norm(7) == 7.0


def test_scaffold_variates_become_the_mean_corrected_gradient_and_steer_the_steps_to_the_global_one():
    """Two workers with constant gradients g_0, g_1 (their shares' optima apart), 5 and 1 steps a round at rate 0.1,
    each step's gradient corrected by c - c_i: after a round each c_i is its own gradient and c their mean, and from
    then on every worker steps along the mean gradient, however many steps it takes."""
    g = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    steps, lr = [5, 1], 0.1
    c = np.zeros(2)
    c_local = [np.zeros(2), np.zeros(2)]
    for _ in range(2):
        changes, deltas = [], []
        for i in range(2):
            delta = -lr * steps[i] * (g[i] + c - c_local[i])
            changes.append(scaffold_change(c_local[i], c, delta, steps[i], lr))
            deltas.append(delta)
        c += sum(changes) / 2
    assert np.allclose(c_local[0], g[0]) and np.allclose(c_local[1], g[1])
    assert np.allclose(c, (g[0] + g[1]) / 2)
    assert np.allclose(deltas[0] / steps[0], deltas[1] / steps[1])  # both along -lr x the mean gradient


class OneParameter:
    """A model's trainable parameter as the corrections see it: its data and gradient on one device."""

    def __init__(self, value):
        self.data, self.grad = mx.nd.array(value), mx.nd.zeros(len(value))

    def list_data(self):
        return [self.data]

    def list_grad(self):
        return [self.grad]


def test_client_momentum_makes_a_round_repeat_beta_of_the_last_global_move_plus_the_rest_of_its_own_gradient():
    beta, lr, steps = 0.9, 0.1, 4
    parameter = OneParameter([1.0, 2.0])
    scheme = types.SimpleNamespace(model=types.SimpleNamespace(trainable=[parameter]), lr_factor=1.0,
                                   options=types.SimpleNamespace(local_lr=lr), start=[[parameter.data.copy()]],
                                   zeros_like_weights=lambda: [mx.nd.zeros(2)])
    momentum = ClientMomentum(beta)
    momentum.setup(scheme)

    parameter.grad[:] = mx.nd.array([1.0, -1.0])
    momentum.correct(scheme)  # the first round: no global move yet
    assert np.allclose(parameter.grad.asnumpy(), [0.1, -0.1])

    momentum.before_send(scheme, steps)
    scheme.start[0][0][:] = mx.nd.array([3.0, 0.0])  # the aggregation moved the global model by (2, -2)
    moved = np.zeros(2)
    for _ in range(steps):  # a round of steps whose own gradient is zero
        parameter.grad[:] = 0
        momentum.correct(scheme)
        moved -= lr * parameter.grad.asnumpy()
    assert np.allclose(moved, beta * np.array([2.0, -2.0]))

    parameter.grad[:] = mx.nd.array([1.0, -1.0])
    momentum.correct(scheme)  # still the same round: the same direction, and 1 - beta of the gradient
    assert np.allclose(parameter.grad.asnumpy(), [0.1, -0.1] + beta * np.array([-2.0, 2.0]) / (lr * steps))


def test_the_drift_correction_is_one_flag_that_sets_its_three_and_refuses_to_be_contradicted(capsys):
    from training import config
    from training.schemes.local_sgd import DRIFT_CORRECTION

    args = config.parse_args(["-m", "esync", "-n", "lenet", "--drift-correction"])

    assert {name: getattr(args, name) for name in DRIFT_CORRECTION} == DRIFT_CORRECTION
    assert vars(args)["drift_correction"]  # the run's meta.json records config=vars(args)
    with pytest.raises(SystemExit) as refused:
        config.parse_args(["-m", "fedavg", "-n", "lenet", "--drift-correction", "--normalisation-power", "0.3"])
    assert refused.value.code == 2
    assert "--drift-correction sets --normalisation-power: leave it out" in capsys.readouterr().err


def test_the_options_choose_the_parts_a_round_is_composed_of():
    def options(**changed):
        fields = dict(proximal=0.0, scaffold=False, client_momentum=0.0, normalised_averaging=False,
                      normalisation_power=1.0, momentum=0.0)
        return types.SimpleNamespace(**{**fields, **changed})

    assert corrections(options()) == [] and isinstance(weighting(options()), PlainAverage)
    chosen = corrections(options(proximal=0.01, scaffold=True, client_momentum=0.9))
    assert [type(c) for c in chosen] == [ProximalTerm, Scaffold, ClientMomentum] and chosen[0].rho == 0.01
    assert chosen[2].beta == 0.9
    normalised = weighting(options(normalised_averaging=True, normalisation_power=0.5, momentum=0.9))
    assert isinstance(normalised, NormalisedAverage) and (normalised.power, normalised.momentum) == (0.5, 0.9)


def test_the_normalised_weighting_divides_a_delta_by_its_work_to_the_power_and_sends_what_scales_the_sum():
    deltas, control = [mx.nd.array([8.0, 4.0])], mx.nd.zeros((3,))

    NormalisedAverage(power=0.5, momentum=0.0).weigh(deltas, steps=4, control=control)

    assert deltas[0].asnumpy().tolist() == [4.0, 2.0]          # / 4^0.5
    assert control.asnumpy().tolist() == [0.0, 4.0, 2.0]       # a_i and a_i^(1 - p) beside the stop vote
    summed = mx.nd.array([0.0, 4.0 + 1.0, 2.0 + 1.0])          # with a worker of one step
    assert NormalisedAverage(0.5, 0.0).scale(summed, 2) == pytest.approx(normalised_scale(5.0, 3.0, 2))
    assert PlainAverage().scale(summed, 2) == 0.5


class InFlight:
    """A sum started by the transport (transport.start_sum's answer)."""
    seconds = 0.25

    def __init__(self):
        self.waited = self.abandoned = False

    def wait(self):
        self.waited = True

    def abandon(self):
        self.abandoned = True


def averaging_of_one_parameter(overlap):
    """What a timing reads of DeltaAveraging, for one parameter of two weights; its start W = 0, weights 1."""
    weights = mx.nd.array([1.0, 1.0])
    averaging = types.SimpleNamespace(options=types.SimpleNamespace(overlap=overlap), stats=None, sum_keys=[0],
                                      buffers=[], num_workers=2, start=[[mx.nd.zeros((2,))]], in_flight=[])
    averaging.model = types.SimpleNamespace(trainable=[types.SimpleNamespace(list_data=lambda: [weights])], aux=[],
                                            ctxs=[mx.cpu()])
    averaging.zeros_like_weights = lambda: [mx.nd.zeros((2,))]
    averaging.fill_buffers = lambda stop_vote, keep=None: (weights - averaging.start[0][0]).copyto(keep[0])
    averaging.transport = types.SimpleNamespace(
        start_sum=lambda keys, buffers: averaging.in_flight.append(InFlight()) or averaging.in_flight[-1])
    averaging.global_moves = lambda: [mx.nd.array([0.5, 0.5])]  # the average's move of W
    averaging.observe_aggregation = lambda seconds: None
    averaging.stop_requested = lambda: False
    averaging.aggregate_now = lambda stop_vote: "summed at once"
    return averaging, weights


def test_the_plain_timing_aggregates_at_once_and_changes_nothing_else():
    averaging, _ = averaging_of_one_parameter(overlap=False)
    at_once = timing(averaging)

    assert type(at_once) is AtOnce and not at_once.overlaps
    assert at_once.aggregate(False) == "summed at once"
    assert at_once.settle(lambda: "waited for everything") == "waited for everything"


def test_the_overlapped_timing_sends_without_waiting_and_applies_the_sum_a_round_late():
    averaging, weights = averaging_of_one_parameter(overlap=True)
    overlapped = timing(averaging)
    assert type(overlapped) is Overlapped and overlapped.overlaps

    assert overlapped.aggregate(False) is False  # the round's delta sent, nothing waited for
    first, = averaging.in_flight
    assert not first.waited and overlapped.sent[0].asnumpy().tolist() == [1.0, 1.0]
    weights += 0.25  # the next round's local steps

    assert overlapped.aggregate(False) is False
    assert first.waited and len(averaging.in_flight) == 2
    assert averaging.start[0][0].asnumpy().tolist() == [0.5, 0.5]  # W moved by the average
    assert weights.asnumpy().tolist() == [0.75, 0.75]              # W + the progress since sending
    assert [a.asnumpy().tolist() for a in overlapped.global_arrays(None)] == [[0.5, 0.5]]
    record = {}
    overlapped.record(record)
    assert record == {runlog.AVERAGE_IN_FLIGHT: 0.25}
    overlapped.record(record := {})
    assert record == {}  # logged once, by the round that applied it

    overlapped.finish()
    assert averaging.in_flight[1].abandoned  # training ended with a sum in flight that nothing will apply

