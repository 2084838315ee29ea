"""--epochs, the aliases of the step options, and the checkpoint options' defaults."""
import argparse

import numpy as np
import pytest

from data import BatchStream
from tests.checkpoint_helpers import BASE
from tests.jobs import run_main
from training import config
from training.loop import StopCondition


# ----------------------------------------------------------------------------------------------
# --epochs


def test_passes_count_whole_batches_of_the_share():
    stream = BatchStream(np.zeros((100, 1, 2, 2), np.uint8), np.zeros(100, np.int32), batch_size=32)
    passes = []
    for _ in range(4):
        stream.next()
        passes.append(stream.passes)

    assert passes == pytest.approx([1 / 3, 2 / 3, 1.0, 1 + 1 / 3])


def test_epochs_stop_training():
    stop = StopCondition(max_epochs=2)

    assert stop.reason(10, 1.0, None, epochs=1.9) is None
    assert stop.reason(10, 1.0, None, epochs=2.0) == "reached --epochs 2"


def test_max_steps_and_eval_freq_are_aliases():
    args = config.parse_args(["--max-steps", "7", "--eval-freq", "3"])

    assert (args.max_iters, args.eval_duration) == (7, 3)


def test_a_local_job_stops_after_its_epochs(tmp_path):
    # 4000 samples, batch 100: 40 steps per pass.
    result = run_main(["-m", "local", *BASE, "-b", "100", "--epochs", "1.5", "-e", "0", "-ld", str(tmp_path)])

    assert result.returncode == 0, result.stderr
    assert "finished: 60 global iterations" in result.stderr and "reached --epochs 1.5" in result.stderr


def test_args_namespace_has_checkpoint_defaults():
    args = config.parse_args([])

    assert isinstance(args, argparse.Namespace)
    assert (args.train_dir, args.save_freq, args.resume, args.epochs) == (None, 100, False, None)
