"""Bad input ends in one line on stderr and a non-zero exit, before any process waits on the network."""
import pytest

from launch import SUBPROGRAMS
from launcher.cluster import free_port
from tests.jobs import run_main
from training import config

BASE = ["-n", "lenet", "--dataset", "mnist-5k", "-dd", "data", "-c", "1"]


def worker_env():
    # Nothing listens there: a worker that tried to join the cluster would hang, and the test would time out.
    return {"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2"}


@pytest.mark.parametrize("args, message", [
    (["-m", "sync", "-n", "vgg99", "--dataset", "mnist-5k", "-dd", "data"], "invalid choice: 'vgg99'"),
    (["-m", "fastest", *BASE], "invalid choice: 'fastest'"),
    (["-m", "sync", *BASE, "-b", "0"], "expected a positive number"),
    (["-m", "sync", *BASE, "-dd", "/nonexistent"], "mnist-5k not found: missing /nonexistent/mnist-5k/"),
    (["-m", "sync", "-n", "lenet", "--dataset", "fashion-mnist", "-dd", "data"], "get it from"),
    (["-m", "sync", "-n", "lenet", "--dataset", "mnist-5k", "-dd", "data", "-g", "0"], "GPU 0 requested"),
    (["-m", "sync", *BASE, "-b", "4000"], "fewer than the batch size 4000"),
    (["-m", "nbsync", *BASE, "-b", "100", "--mini-batches", "8"], "-b 100 is not a multiple of --mini-batches 8"),
    (["-m", "nbsync", *BASE, "--mini-batches", "0"], "--mini-batches: expected a positive number"),
    (["-m", "sync", *BASE, "--slowdown", "0.5"], "--slowdown must be >= 1"),
    (["-m", "sync", *BASE, "--worker-index", "2"], "--worker-index 2: the job has 2 workers, at positions 0 to 1"),
    (["-m", "sync", *BASE, "--validator"], "--validator belongs to -m zeno"),
    (["-m", "sync", *BASE, "--byzantine", "2"], "--byzantine 2 leaves no honest worker among 2"),
    (["-m", "zeno", *BASE, "--byzantine", "1"], "--byzantine 1 leaves no honest worker among 1"),
    (["-m", "zeno", *BASE, "--validation-size", "10"], "--validation-size 10 is smaller than the batch size 64"),
    (["-m", "zeno", *BASE, "--attack", "bribe"], "invalid choice: 'bribe'"),
    (["-m", "local", *BASE], "-m local trains without a cluster"),
    (["-m", "sync", *BASE, "-s", "maybe"], "-s/--split-by-class: expected True, False, 1 or 0, got 'maybe'"),
    (["-m", "sync", "-n", "lenet", "--dataset", "mnist-5k", "-dd", "data", "-c", "yes"],
     "-c/--cpu: expected True, False or a number of CPU contexts, got 'yes'"),
    (["-m", "sync", *BASE, "--local-optimizer", "adam"], "--local-optimizer belongs to -m esync, fedavg, fedasync, "
                                                          "fedbuff, async-local-sgd, tifl, feddrop, local, "
                                                          "validation-only, not -m sync"),
    (["-m", "dcasgd", *BASE, "--dc-adaptive", "0.95"], "--dc-adaptive belongs to -m dcasgd-paper, not -m dcasgd"),
    (["-m", "dcasgd-paper", *BASE, "--dc-adaptive", "1"], "--dc-adaptive: expected a momentum in [0, 1), got '1'"),
    (["-m", "esync", *BASE, "--local-optimizer", "adam", "--momentum", "0.9"], "--momentum is SGD's"),
    (["-m", "esync", *BASE, "--local-optimizer", "momentum", "--momentum", "0"], "needs --momentum > 0"),
    (["-m", "esync", *BASE, "--local-optimizer", "nesterov"], "invalid choice: 'nesterov'"),
    (["-m", "sync", *BASE, "--wd", "-0.1"], "--wd: expected a number >= 0"),
    (["-m", "sync", *BASE, "--overlap"], "--overlap belongs to -m esync, fedavg, diloco, not -m sync"),
    (["-m", "esync", *BASE, "--esync-policy", "plan", "--aggregation-share", "0.2"], "--aggregation-share sizes the adaptive policy's rounds"),
    (["-m", "esync", *BASE, "--esync-policy", "plan", "--max-slowest-steps", "4"], "add --esync-policy adaptive"),
    (["-m", "esync", *BASE, "--esync-policy", "adaptive", "--aggregation-share", "0"], "expected a number in (0, 1]"),
    (["-m", "esync", *BASE, "--esync-policy", "adaptive", "--max-slowest-steps", "0"], "expected a positive number"),
    (["-m", "esync", *BASE, "--normalisation-power", "0.5"], "--normalisation-power is a power of --normalised-averaging"),
    (["-m", "esync", *BASE, "--normalised-averaging", "--normalisation-power", "0"], "expected a number in (0, 1]"),
])
def test_bad_worker_input_is_one_line_and_exits_before_the_network(args, message):
    result = run_main(args, worker_env(), timeout=30)

    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["-m", "sync", *BASE, "-ld", "/proc/nope"], "-ld: cannot create or write /proc/nope/"),
    (["-m", "sync", *BASE, "-ld", "/etc/hostname/logs"], "-ld: cannot create or write /etc/hostname/logs/"),
    (["-m", "sync", *BASE, "--train-dir", "/proc/nope"], "--train-dir: cannot create or write /proc/nope ("),
])
def test_a_folder_that_cannot_be_written_is_one_line_and_exit_2_before_the_network(args, message):
    result = run_main(args, worker_env(), timeout=30)

    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [["-m", "local", *BASE, "-ld", "/proc/nope"],
                                  ["-m", "evaluate", *BASE, "--train-dir", "runs", "-ld", "/proc/nope"]])
def test_standalone_and_evaluator_refuse_an_unwritable_log_folder_in_one_line(args):
    result = run_main(args, timeout=30)

    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("main.py: error: -ld: cannot create or write /proc/nope")
    assert "Traceback" not in result.stderr


def test_a_cluster_mode_without_dmlc_role_says_how_to_start_one():
    result = run_main(["-m", "sync", *BASE], timeout=30)

    assert result.returncode == 2
    assert "needs a cluster" in result.stderr


def test_missing_dmlc_variables_are_named():
    result = run_main(["-m", "sync", *BASE], {"DMLC_ROLE": "server"}, timeout=30)

    assert result.returncode == 2
    assert "DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER" in result.stderr


def test_an_unknown_role_is_refused():
    result = run_main(["-m", "sync", *BASE], {"DMLC_ROLE": "boss"}, timeout=30)

    assert result.returncode == 2
    assert "DMLC_ROLE='boss'" in result.stderr


def test_esync_without_a_state_server_names_its_address():
    port = free_port()
    result = run_main(["-m", "esync", *BASE, "-ip", "127.0.0.1", "-port", str(port), "--sync-timeout", "1"],
                      worker_env(), timeout=60)

    assert result.returncode == 2
    assert f"http://127.0.0.1:{port}" in result.stderr and "runserver" in result.stderr


@pytest.mark.parametrize("batch, parts", [(64, 2), (256, 8), (100, 2), (96, 3), (16, 1), (32, 1)])
def test_nbsync_splits_a_batch_into_parts_of_at_least_32_samples_by_default(batch, parts):
    assert config.parse_args(["-m", "nbsync", "-b", str(batch)]).mini_batches == parts


@pytest.mark.parametrize("argv, field, value", [
    (["-m", "dcasgd-paper"], "dc_lambda", 0.04),                         # DC-ASGD-c
    (["-m", "dcasgd-paper", "--dc-adaptive", "0.95"], "dc_lambda", 2.0),  # DC-ASGD-a's lambda0
    (["-m", "dcasgd-paper", "--dc-adaptive", "0.95", "--dc-lambda", "1"], "dc_lambda", 1.0),
    (["-m", "downpour", "--server-optimizer", "adagrad"], "momentum", 0.0),
])
def test_the_rivals_flags_resolve_to_their_papers_defaults(argv, field, value):
    assert getattr(config.parse_args(argv), field) == value


@pytest.mark.parametrize("argv, message", [
    (["-m", "sync", "--proximal", "0.01"], "--proximal belongs to -m esync, fedavg, diloco, fedasync, not -m sync"),
    (["-m", "async", "--server-momentum", "0.9"], "--server-momentum belongs to -m esync, fedavg, not -m async"),
    (["-m", "async", "--server-optimizer", "adagrad"], "--server-optimizer belongs to -m downpour, not -m async"),
    (["-m", "downpour", "--server-optimizer", "adagrad", "--momentum", "0.9"], "--momentum is SGD's"),
    (["-m", "async", "--update-on-servers"], "--update-on-servers belongs to -m sync"),
    # given at its default, a flag no scheme of the mode reads is refused all the same
    (["-m", "esync", "--backup-workers", "1"], "--backup-workers belongs to -m backup, not -m esync"),
    (["-m", "sync", "--tiers=2"], "--tiers belongs to -m tifl, not -m sync"),
    # a schedule's or the evaluator's setting where nothing reads it
    (["-m", "sync", "--lr-steps", "5"], "--lr-steps and --lr-factor set --lr-schedule step's drops; the schedule "
                                        "is constant"),
    (["-m", "sync", "--lr-schedule", "cosine", "--epochs", "2", "--lr-factor", "0.5"], "the schedule is cosine"),
    (["-m", "local", "--eval-timeout", "5"], "--eval-timeout is the evaluator's (-m evaluate), not -m local's"),
])
def test_a_flag_where_nothing_of_the_process_reads_it_is_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        config.parse_args(argv)

    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line


def test_the_step_schedule_takes_its_drops():
    assert config.parse_args(["-m", "sync", "--lr-schedule", "step", "--lr-steps", "5", "--lr-factor", "0.5"]).lr_steps \
        == (5,)


def test_the_launcher_drops_another_modes_flags_with_their_values_and_switches_alone():
    argv = ["--overlap", "--eval-seconds", "0.5", "--proximal", "0.1", "--scaffold", "-b", "32"]

    assert config.flags_for_mode(argv, "local") == ["--eval-seconds", "0.5", "-b", "32"]
    assert config.flags_for_mode(argv, "sync") == ["--eval-seconds", "0.5", "-b", "32"]
    assert config.flags_for_mode(argv, "esync") == argv


def test_the_help_of_a_mode_shows_its_own_flags_with_their_defaults_and_ranges_and_no_other_modes():
    result = run_main(["-m", "esync", "--help"])
    text = result.stdout

    assert result.returncode == 0 and len(text.splitlines()) < 80
    assert "--local-lr" in text and "--global-lr" in text and "(default 0.001)" in text
    assert "launch.py tune searches log-uniform" in text
    assert "--dc-lambda" not in text and "--rho" not in text and "--batch-size" not in text


def test_the_common_help_shows_the_flags_every_mode_reads_and_lists_the_modes():
    result = run_main(["--help"])
    text = result.stdout

    assert result.returncode == 0 and "--batch-size" in text and "--max-time" in text
    assert all(f"  {mode} " in text for mode in ("esync", "sync", "async", "dcasgd", "hogwild"))
    assert "--dc-lambda" not in text and "--local-lr" not in text


@pytest.mark.parametrize("command", sorted(SUBPROGRAMS))
def test_every_command_of_launch_py_says_its_usage_on_help_and_exits_0(command, capsys):
    import launch

    try:
        code = launch.main([command, "--help"])
    except SystemExit as ended:  # argparse's --help
        code = ended.code
    assert code in (0, None) and "usage: " in capsys.readouterr().out  # submit's is dmlc_tracker's own parser


@pytest.mark.parametrize("command", sorted(set(SUBPROGRAMS) - {"submit"}))  # submit's is dmlc_tracker's own parser
def test_every_command_of_launch_py_refuses_an_unknown_flag_in_one_line_and_exit_2(command, capsys):
    import launch

    try:
        code = launch.main([command, "--no-such-flag"])
    except SystemExit as ended:
        code = ended.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("launch.py") and ": error: " in err[0], err


@pytest.mark.parametrize("argv, message", [
    (["tune", "--profile", "1,x"], "--profile 1,x: 'x' is neither a factor nor NxF (F for N devices)"),
    (["regimes", "--profiles", "1,,4"], "--profiles 1,,4: '' is neither a factor nor NxF (F for N devices)"),
    (["noise-scale", "--network", "vgg99"], "argument -n/--network: invalid choice: 'vgg99'"),
    (["rate-sweep", "--dataset", "svhn"], "argument --dataset: invalid choice: 'svhn'"),
    (["noise-scale", "--targets", "0.8,1.5"], "--targets 0.8,1.5: give accuracies in (0, 1], e.g. 0.8,0.85"),
    (["rate-sweep", "--targets", "0,0.8"], "--targets 0,0.8: give accuracies in (0, 1], e.g. 0.8,0.85"),
])
def test_a_studys_bad_device_list_network_data_set_or_target_is_one_line_naming_it(argv, message, capsys):
    import launch

    try:
        code = launch.main(argv)
    except SystemExit as ended:
        code = ended.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
