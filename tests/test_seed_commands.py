"""The original ESync README's commands, as written there: its flag spellings, its cluster lines, its summary and
figure lines.

The cluster test runs the README's scheduler, server and CPU worker lines word for word in a folder laid out as
the original repository expects (main.py, summary.py, drawer.py, data/fashion-mnist/), changing only addresses:
the DMLC variables name loopback and a free port, DMLC_INTERFACE is lo, and the workers find the state server
on its free port (-port). The shipped MNIST sample stands in for Fashion-MNIST (the same file layout).
"""
import glob
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time

import pytest

from launcher.cluster import ROOT, free_port, start_state_server, tail
from tests.jobs import run_main
from training import config

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others

SCHEDULER = "python main.py -c True -m esync"
SERVER = "python main.py -c True -m esync"
GPU_WORKER = "python main.py -g 0 -m esync -n resnet18-v1"
CPU_WORKER = "python main.py -c 1 -m esync -n resnet18-v1"
STANDALONE = "python main.py -m local -n resnet18-v1 -g 0 -e 100"
SUMMARY = "python summary.py -b {logs} -n resnet18-v1 -m esync"
DRAWER = "python drawer.py -b {logs} -n resnet18-v1"
CPU_WORKERS = 2  # the seed's cluster has two CPU machines
ROUNDS = 1       # logged by every worker before the test stops the job (the seed's lines have no stop flag)


@pytest.mark.parametrize("flags, cpu, split", [
    (["-c", "True"], 1, 0), (["-c", "true"], 1, 0), (["-c", "FALSE"], 0, 0), (["-c", "1"], 1, 0),
    (["-c", "2"], 2, 0), (["-s", "True"], 0, 1), (["-s", "false"], 0, 0), (["-s", "1"], 0, 1), (["-s", "0"], 0, 0),
])
def test_the_seeds_bool_spellings_of_cpu_and_split_by_class(flags, cpu, split):
    args = config.parse_args(["-m", "esync", *flags])

    assert (args.cpu, args.split_by_class) == (cpu, split)


def test_the_seeds_script_lines_with_dcasgd_off_and_its_learning_rate_parse_as_esync():
    args = config.parse_args(shlex.split("-c 1 -m esync -dcasgd 0 -n resnet18-v1 -s 0 -l 0.0005"))

    assert (args.mode, args.cpu, args.split_by_class, args.learning_rate) == ("esync", 1, 0, 0.0005)


def worker_env():
    return {"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": str(CPU_WORKERS)}


@pytest.mark.parametrize("line, env", [(GPU_WORKER, worker_env()), (STANDALONE, None)])
def test_the_seeds_gpu_lines_say_in_one_line_that_this_machine_has_no_gpu(line, env):
    import mxnet as mx

    if mx.context.num_gpus() > 0:
        pytest.skip("this machine has a GPU")
    result = run_main(shlex.split(line)[2:], env, timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip() == ("main.py: error: GPU 0 requested but MXNet sees 0 GPU(s) on this machine; "
                                     "use -c 1 for the CPU")


def seed_folder(tmp_path):
    """A folder laid out as the original repository: its scripts, and data/fashion-mnist/."""
    folder = tmp_path / "ESync"
    (folder / "data").mkdir(parents=True)
    for script in ("main.py", "summary.py", "drawer.py"):
        (folder / script).symlink_to(os.path.join(ROOT, script))
    (folder / "data" / "fashion-mnist").symlink_to(os.path.join(ROOT, "data", "mnist-5k"))
    return str(folder)


def as_run_here(line, **values):
    """A README line's argv, with this interpreter as its `python`."""
    argv = shlex.split(line.format(**values))
    return [sys.executable] + argv[1:]


def seed_env(role, root_port):
    return {"DMLC_ROLE": role, "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(root_port),
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": str(CPU_WORKERS), "PS_VERBOSE": "1", "DMLC_INTERFACE": "lo"}


def rounds_logged(folder):
    return [len(glob.glob(os.path.join(worker, "iter-*.txt")))
            for worker in sorted(glob.glob(os.path.join(folder, "logs", socket.gethostname(), "cpu-worker*")))]


def wait_for_rounds(processes, folder, rounds, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logged = rounds_logged(folder)
        if len(logged) == CPU_WORKERS and min(logged) >= rounds:
            return logged
        failed = processes.failed()
        assert failed is None, f"{failed.name} exited {failed.poll()}:\n{tail(failed.output, 30)}"
        time.sleep(0.5)
    outputs = "\n".join(f"--- {p.name}\n{tail(p.output, 15)}" for p in processes.procs)
    pytest.fail(f"rounds logged after {timeout} s: {rounds_logged(folder)}\n{outputs}")


def run_here(argv, folder):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # where the groups' lengths balance
def test_the_seeds_cluster_lines_train_and_its_summary_and_drawer_lines_read_the_logs(tmp_path, processes):
    folder = seed_folder(tmp_path)
    state_port = start_state_server(processes)
    root_port = free_port()
    processes.start("scheduler", as_run_here(SCHEDULER), seed_env("scheduler", root_port), role="scheduler",
                    cwd=folder)
    processes.start("server", as_run_here(SERVER), seed_env("server", root_port), role="server", cwd=folder)
    for w in range(CPU_WORKERS):
        processes.start(f"worker-{w}", as_run_here(CPU_WORKER) + ["-port", str(state_port)],
                        seed_env("worker", root_port), role="worker", cwd=folder)

    wait_for_rounds(processes, folder, ROUNDS, timeout=240)
    processes.stop()

    # As the seed's user does: the run's logs under <logs>/<network>/<mode>/, then its two lines.
    logs = os.path.join(tmp_path, "runs")
    shutil.move(os.path.join(folder, "logs"), os.path.join(logs, "resnet18-v1", "esync"))
    summary = run_here(as_run_here(SUMMARY, logs=logs), folder)
    assert summary.returncode == 0, summary.stderr
    drawer = run_here(as_run_here(DRAWER, logs=logs), folder)
    assert drawer.returncode == 0, drawer.stderr
    with open(os.path.join(logs, "resnet18-v1", "esync", "ESync.json")) as f:
        summarized = json.load(f)
    assert summarized["num_workers"] == CPU_WORKERS and summarized["num_rounds"] >= ROUNDS
    assert summarized["cluster_throughput"] > 0 and summarized["final_accuracy"] is not None
    assert glob.glob(os.path.join(logs, "resnet18-v1", "figures", "*.png"))
