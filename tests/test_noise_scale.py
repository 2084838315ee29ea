"""The gradient noise scale (launcher/studies/noise_scale.py): the estimator against a problem whose noise scale is known in
closed form, the ratio it predicts, and `launch.py noise-scale` on the shipped data."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from launcher.studies import noise_scale, rate_sweep
from tests.test_launch import launcher_env
from tests.test_virtual_clock import LAUNCH_PY


def test_the_estimates_of_the_mean_gradient_and_the_noise_are_unbiased_on_least_squares():
    # Least squares, y = x.w* + noise, at a point w: a sample's gradient is x (x.w - y). Over a finite population the
    # mean gradient G and the covariance S of the per-sample gradients are computed exactly.
    rng = np.random.RandomState(0)
    x = rng.normal(size=(20000, 5))
    y = x @ np.arange(1.0, 6.0) + rng.normal(scale=0.5, size=20000)
    per_sample = x * (x @ np.full(5, 2.0) - y)[:, None]
    true_sq = float(np.sum(per_sample.mean(axis=0) ** 2))
    trace = float(np.trace(np.cov(per_sample.T, bias=True)))
    small, big = 8, 32

    found = []
    for _ in range(4000):
        batch = per_sample[rng.randint(0, len(per_sample), big)]  # drawn with replacement: i.i.d. samples
        small_sq = np.mean([np.sum(batch[i * small:(i + 1) * small].mean(axis=0) ** 2) for i in range(big // small)])
        found.append(noise_scale.estimates(small_sq, np.sum(batch.mean(axis=0) ** 2), small, big))
    estimated_sq, estimated_trace = np.mean(found, axis=0)

    assert estimated_sq == pytest.approx(true_sq, rel=0.05)
    assert estimated_trace == pytest.approx(trace, rel=0.05)


def test_the_ratio_runs_from_nothing_gained_without_noise_to_n_times_fewer_steps_where_noise_dominates():
    assert noise_scale.predicted_ratio(0.0, 64, 4) == 1.0
    assert noise_scale.predicted_ratio(1e9, 64, 4) == pytest.approx(4.0, rel=1e-6)
    assert noise_scale.predicted_ratio(64.0, 64, 4) == pytest.approx(2 / 1.25)


def test_the_ratio_at_a_target_takes_the_noise_scale_where_training_first_reaches_it():
    points = [{"step": 10, "accuracy": 0.7, "b_simple": 10.0}, {"step": 20, "accuracy": 0.82, "b_simple": 64.0},
              {"step": 30, "accuracy": 0.9, "b_simple": 500.0}]

    found = noise_scale.ratios(points, [0.8, 0.95], 64, 4)

    assert found["0.8"] == {"step": 20, "b_simple": 64.0, "ratio": pytest.approx(1.6)} and found["0.95"] is None


def test_launch_noise_scale_writes_its_estimates_and_figure_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "ns"
    ran = subprocess.run([sys.executable, LAUNCH_PY, "noise-scale", "--dataset", "mnist-5k", "--devices", "2", "-b",
                          "16", "--steps", "4", "--eval-every", "2", "--out", str(out)],
                         capture_output=True, text=True, env=launcher_env(), timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    result = json.loads((out / noise_scale.FILE_NAME).read_text())
    assert [p["step"] for p in result["points"]] == [2, 4] and result["devices"] == 2
    assert all(p["b_simple"] is not None for p in result["points"]) and set(result["ratios"]) == {"0.8", "0.85"}
    assert os.path.getsize(out / noise_scale.FIGURE_NAME) > 0

    assert noise_scale.run(["--devices", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["launch.py noise-scale: error: --devices 1: give 2 or more"]


def test_the_docs_table_sets_the_predicted_ratio_for_a_maps_fast_devices_beside_the_measured_one(tmp_path):
    from training.files import write_json

    write_json(str(tmp_path / noise_scale.FILE_NAME), {"batch_size": 64, "devices": 4, "command": "c", "points": [
        {"step": 10, "accuracy": 0.85, "b_simple": 64.0}]})
    (tmp_path / "map").mkdir()
    write_json(str(tmp_path / "map" / "regimes.json"), {"target": 0.8, "cells": [
        {"link": "loopback", "profile": "1,1,4", "at_higher_targets": {}, "schemes": {
            "local": {"rounds_to_target": {"values": [100, 120, 110]}},
            "fast-only": {"rounds_to_target": {"values": [50, 60, 55, None]}}}},
        {"link": 12.0, "profile": "1,1,4", "at_higher_targets": {}, "schemes": {}}]})

    table = noise_scale.block(str(tmp_path), str(tmp_path / "map"))

    # two fast devices of 64 at B_simple 64: (1 + 1) / (1 + 0.5); measured 110 / 55
    assert "| 1,1,4 (2) | 0.8 | 64 (10) | 1.33 | 2.00 (110 / 55) | 1.50 |" in table
    assert table.count("\n| 1,1,4") == 1  # the cell on costly links is left out
    write_json(str(tmp_path / noise_scale.FILE_NAME), {"batch_size": 64, "devices": 4, "command": "c", "points": [
        {"step": 10, "accuracy": 0.85, "b_simple": 64.0}], "ratios": {"0.85": {}}})
    alone = noise_scale.block(str(tmp_path))  # a network no map ran: the prediction for the maps' fast devices
    # 4 fast devices: (1 + 1) / (1 + 0.25); 12: 2 / (1 + 1 / 12); 48: 2 / (1 + 1 / 48)
    assert [line.split(" | ")[3] for line in alone.splitlines() if line.startswith("| any")] == ["1.60", "1.85", "1.96"]


def test_the_verdict_table_shows_the_ceiling_the_noise_scale_sets_for_the_cells_fast_devices(tmp_path):
    from analysis import doc_tables
    from tests.test_doc_tables import a_study
    from training.files import write_json

    a_study(str(tmp_path), pairs=2)  # lenet on mnist-5k, devices 1,4: one fast device
    folder = tmp_path / "results" / "noise-scale-lenet-mnist-5k"
    folder.mkdir()
    write_json(str(folder / noise_scale.FILE_NAME), {"batch_size": 64, "devices": 4, "points": [
        {"step": 10, "accuracy": 0.9, "b_simple": 64.0}]})

    fresh = doc_tables.regenerate("<!-- generated: answers cell -->\n<!-- end generated -->\n", str(tmp_path))

    assert "against ESync; ceiling 1.00 |" in fresh  # one fast device: SSGD on it buys nothing


# ----------------------------------------------------------------------------------------------
# The rate re-tuned per batch size (launch.py rate-sweep)


def sweep_result(runs):
    return {"devices": [1, 4], "rates": [0.001, 0.002, 0.004], "targets": [0.8], "seeds": [0, 1], "runs": {
        rate_sweep.run_key(n, rate, seed): {"steps": {"0.8": steps}} for (n, rate, seed), steps in runs.items()}}


def test_each_device_count_takes_its_rate_of_least_median_steps_a_half_that_missed_counting_as_never():
    result = sweep_result({(1, 0.001, 0): 400, (1, 0.001, 1): 500, (1, 0.002, 0): 300, (1, 0.002, 1): 350,
                           (1, 0.004, 0): 100, (1, 0.004, 1): None,  # half missed: never, not 100
                           (4, 0.001, 0): 300, (4, 0.001, 1): 300, (4, 0.002, 0): 200, (4, 0.002, 1): 250,
                           (4, 0.004, 0): 150, (4, 0.004, 1): 170})

    best = rate_sweep.best_rates(result)

    assert best["1"]["0.8"] == {"rate": 0.002, "steps": 325.0, "at_edge": False}
    assert best["4"]["0.8"] == {"rate": 0.004, "steps": 160.0, "at_edge": True}  # a larger rate may do better
    assert "| 4 | 0.8 | 0.002 (325) | 0.004 (edge) (160) | 2.03 | – | – |" in rate_sweep.table(result)


def test_a_sweep_declared_but_not_run_says_how_to_run_it_in_the_docs(tmp_path):
    assert rate_sweep.block(str(tmp_path / "rate-sweep-x")) == (
        "Declared, not run yet: `python launch.py study rate-sweep-x`.\n")


def test_a_rate_sweep_runs_each_device_count_and_rate_once_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "sweep"  # in this process: its training is the noise scale's, which a test runs by its command
    argv = ["--dataset", "mnist-5k", "--devices", "1,2", "-b", "16", "--rates", "0.002,0.004", "--steps", "4",
            "--eval-every", "2", "--targets", "0.5", "--out", str(out)]
    printed = []
    for _ in range(2):
        assert rate_sweep.run(argv) == 0
        printed.append(capsys.readouterr().out)

    result = json.loads((out / rate_sweep.FILE_NAME).read_text())
    assert sorted(result["runs"]) == ["1|0.002|0", "1|0.004|0", "2|0.002|0", "2|0.004|0"]
    assert printed[0].count("[rate-sweep] ") == 5 and printed[1].count("[rate-sweep] ") == 1  # nothing again
    assert "| 2 | 0.5 |" in printed[1]

    assert rate_sweep.run(["--devices", "4,8"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "launch.py rate-sweep: error: --devices 4,8: give 1 (the ratios' base) and more"]
