"""What counts as applied throughput: samples whose update reached the model (analysis/metrics.py)."""
import pytest

from analysis import metrics


def round_of(samples=64, **fields):
    return {"num_samples": samples, "total_time": 1.0, "time": {"0": {"forward and backward": 0.01}}, **fields}


def test_a_step_the_backup_workers_rule_dropped_is_computed_but_not_applied():
    records = [round_of(dropped=True), round_of(dropped=False), round_of()]

    assert metrics.applied_samples(records) == 128
    assert metrics.summarize_device(dict(enumerate(records, 1)))["total_samples"] == 192


def test_zeno_applies_the_share_of_a_delta_its_rule_accepted_layer_by_layer():
    records = [round_of(zeno_layers=4, zeno_accepted_layers=1), round_of(zeno_layers=4, zeno_accepted_layers=4)]

    assert metrics.applied_samples(records) == 16 + 64


def test_zeno_plus_plus_applies_the_share_of_the_judged_gradients_it_accepted():
    records = [round_of(zeno_accepted_updates=3, zeno_judged_updates=4), round_of(zeno_accepted_updates=0,
                                                                                  zeno_judged_updates=0)]

    assert metrics.applied_samples(records) == pytest.approx(128 * 0.75)
