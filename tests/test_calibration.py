"""`launch.py calibrate` (launcher/calibrate.py): what the virtual clock charges, measured on this machine; and a run
given the file charged it, each flag beside the file standing over its field (launcher/calibration.py)."""
import glob
import json
import os
import subprocess
import sys

import pytest

from launcher import experiment
from tests.test_launch import launcher_env
from tests.test_virtual_clock import LAUNCH_PY, virtual_run
from training import runlog
from training.checks import UsageError


@pytest.mark.parametrize("flag", ["--round-trip", "--server-apply", "--step-jitter"])
def test_a_charge_given_in_real_time_is_refused(flag):
    with pytest.raises(UsageError, match="are charged on a virtual clock: give --clock virtual"):
        experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", flag, "0.01"])


CALIBRATED = {"network": "lenet", "dataset": "mnist-5k", "batch_size": 64, "step_seconds": 0.012,
              "overhead_seconds": 0.002, "period_seconds": 0.014, "compute_seconds": 0.01, "jitter": 0.1,
              "round_trip_seconds": 0.002, "server_apply_seconds_per_mb": 0.001, "model_bytes": 177704}
REAL_LENET = ["--modes", "sync", "--slowdown", "1,4", "-n", "lenet", "--dataset", "mnist-5k", "--max-time", "5"]


def test_in_real_time_a_calibration_file_sizes_the_comm_ratios_links_and_nothing_is_probed(tmp_path, monkeypatch):
    from launcher import comm_ratio

    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps(CALIBRATED))
    run = experiment.parse(REAL_LENET + ["--hosts", "netns", "--comm-ratio", "12", "--step-seconds", str(devices)])
    monkeypatch.setattr(comm_ratio, "measure", lambda _: pytest.fail("probed despite the calibration file"))

    resolved = comm_ratio.resolve(run)

    assert resolved.cluster.worker_rate == comm_ratio.rate_for(12, 0.012, 177704)
    assert resolved.cluster.regime["fast_step_seconds"] == 0.012 and resolved.charges is None


@pytest.mark.parametrize("extra, refusal", [
    (["--step-seconds", "0.01"], "a number of seconds is charged on --clock virtual"),
    (["--step-seconds", "FILE"], "sets --comm-ratio's links: give --comm-ratio and --hosts netns too"),
])
def test_in_real_time_a_step_is_refused_unless_a_calibration_file_sizes_shaped_links(tmp_path, extra, refusal):
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps(CALIBRATED))
    with pytest.raises(UsageError, match=refusal):
        experiment.parse(REAL_LENET + [str(devices) if arg == "FILE" else arg for arg in extra])


@pytest.mark.slow
@pytest.mark.beside_others(False)  # it checks what was written, not how fast: with the timed tests, where it balances
def test_calibration_writes_the_fast_step_and_a_virtual_run_is_charged_it(tmp_path):
    devices = str(tmp_path / "devices.json")
    calibrated = subprocess.run([sys.executable, LAUNCH_PY, "calibrate", "-n", "lenet", "--dataset", "mnist-5k",
                                 "--slowdown", "1,4", "--out", devices], capture_output=True, text=True,
                                env=launcher_env(), timeout=300)
    assert calibrated.returncode == 0, calibrated.stderr
    record = json.load(open(devices))
    assert record["network"] == "lenet" and record["batch_size"] == 64 and 0 < record["step_seconds"] < 1
    assert record["overhead_seconds"] >= 0 and record["period_seconds"] > 0
    # what else the virtual clock charges, measured here: the steps' spread, the state server, a server's addition
    assert 0 <= record["jitter"] < 1 and 0 < record["round_trip_seconds"] < 1
    assert 0 < record["server_apply_seconds_per_mb"] < 1

    logs = str(tmp_path / "logs")
    code, output = virtual_run(logs, "local", "1,4", "--step-seconds", devices, "--max-time", "0.2")
    meta_path, = glob.glob(os.path.join(logs, "lenet", "local", "*", "*", runlog.META_FILE))

    assert code == 0, output
    clock = json.load(open(meta_path))["clock"]
    assert (clock["step_seconds"], clock["overhead"]) == (record["step_seconds"], record["overhead_seconds"])
    # virtual_run declares --step-jitter 0.2, which stands over the measured spread
    assert (clock["jitter"], clock["round_trip"]) == (0.2, record["round_trip_seconds"])
    assert clock["server_apply"] == pytest.approx(record["server_apply_seconds_per_mb"])
    declared = experiment.parse(["--modes", "esync", "--slowdown", "1,4", "--max-time", "1", "-n", "lenet",
                                 "--dataset", "mnist-5k", "--clock", "virtual", "--step-seconds", devices,
                                 "--round-trip", "0.004"])
    charges = declared.charges
    assert (charges.round_trip, charges.step_jitter) == (0.004, record["jitter"])  # declared over measured
    assert charges.server_apply == record["server_apply_seconds_per_mb"]
    wrong = subprocess.run([sys.executable, LAUNCH_PY, "--modes", "local", "--slowdown", "1", "--max-time", "1",
                            "-n", "lenet", "--dataset", "mnist-5k", "--clock", "virtual", "--step-seconds", devices,
                            "--", "-b", "32"], capture_output=True, text=True, env=launcher_env(), timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.strip().endswith("not for this run's batch_size 32"), wrong.stderr
