"""The mode catalog (training/modes.py): every script reads its modes from it, the old variant flags resolve to
modes of their own, and a mode added to the catalog reaches every script without another change."""
import dataclasses
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from training import config
from analysis import figures as drawer
import main
from analysis import summary
from bench import run as bench
from launcher import commands, experiment
from launcher.cluster import ROOT
from tests import logfactory
from training import checks, modes

FIGURE_ORDER = ("esync", "sync", "async", "dcasgd", "dcasgd-paper", "downpour", "nbsync", "backup", "lb-bsp", "zeno", "zeno-async", "fedavg", "diloco", "fedasync", "fedbuff", "async-local-sgd", "tifl", "feddrop", "hogwild", "local", "validation-only")
LAUNCH_ARGS = ["--devices", "cpu,cpu", "--max-iters", "5", "-n", "lenet", "--dataset", "mnist-5k"]
GOSSIP = modes.Mode("gossip", "Gossip", "Gossip", "darkslategray", "gossip_scheme:Gossip")
# A scheme module written as docs/architecture.md tells a newcomer to: its Options declare one flag of its own.
GOSSIP_SCHEME = '''
    from dataclasses import dataclass

    from training import argtypes
    from training.options import CoordinatedOptions, option
    from training.schemes.sync import Sync


    @dataclass(frozen=True)
    class GossipOptions(CoordinatedOptions):
        fanout: int = option("--fanout", default=2, type=argtypes.POSITIVE_INT,
                             help="the peers each worker averages its model with")


    class Gossip(Sync):
        name = "gossip"
        description = "a mode added in one module"
        Options = GossipOptions
'''


def mode_choices():
    parser = config.build_parser()
    return next(action.choices for action in parser._actions if action.dest == "mode")


STATE_SERVER = ("127.0.0.1", 1234)


def launch_args(mode_names, *extra):
    return experiment.parse(["--modes", mode_names, *LAUNCH_ARGS, *extra])


def test_the_catalog_lists_the_modes_in_the_figures_order_with_distinct_names_and_colours():
    entries = list(modes.MODES.values())

    assert modes.names() == FIGURE_ORDER
    assert modes.cluster_names() == FIGURE_ORDER[:-3]
    for field in ("display", "summary_name", "colour"):
        assert len({getattr(mode, field) for mode in entries}) == len(entries), field
    with pytest.raises(dataclasses.FrozenInstanceError):
        entries[0].name = "other"


def test_the_catalog_imports_no_mxnet(monkeypatch):
    monkeypatch.setitem(sys.modules, "mxnet", None)  # any import of mxnet now fails
    spec = importlib.util.spec_from_file_location("catalog_alone", os.path.join(ROOT, "training", "modes.py"))
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_the_command_line_reads_every_schemes_options_without_loading_mxnet():
    """A scheduler or a summing server parses the job's command line and never needs MXNet's Python package."""
    check = ("import sys; from training import config, modes; "
             "[config.parse_args(['-m', name]) for name in modes.names()]; "
             "print('mxnet.base' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert result.stdout.strip() == "False", result.stderr


def test_config_offers_every_mode_and_the_evaluator():
    assert tuple(mode_choices()) == modes.names() + (config.EVALUATE_MODE,)


def test_launch_runs_every_mode_the_standalone_one_on_the_fastest_worker():
    assert experiment.parse_modes(",".join(modes.names())) == modes.names()
    described = experiment.parse(["--modes", "sync,local", *LAUNCH_ARGS, "--slowdown", "4,1"])

    assert described.cluster.fastest_worker == 1
    with pytest.raises(checks.UsageError, match="--modes local trains one process on this machine"):
        experiment.parse(["--modes", "sync,local", *LAUNCH_ARGS, "--slowdown", "4,1", "--tracker", "local"])


@pytest.mark.parametrize("name", FIGURE_ORDER[:-2])
def test_launch_gives_each_mode_its_flags_state_server_and_validator(name):
    mode = modes.MODES[name]
    described = launch_args(name)
    argv = commands.worker_argv(described, name, 0, "logs", STATE_SERVER)

    assert argv[argv.index("-m") + 1] == name
    assert ("-port" in argv) == mode.state_server
    assert described.validator_hosts == mode.validator
    if mode.validator:
        with pytest.raises(checks.UsageError, match=f"--modes {name} needs its validator process"):
            launch_args(name, "--tracker", "local")


@pytest.mark.parametrize("name", FIGURE_ORDER)
def test_summary_names_each_mode_from_the_catalog(name):
    mode = modes.MODES[name]

    assert summary.is_known_mode(name) and summary.algorithm_name(name) == mode.display
    assert summary.summary_file_name(name) == f"{mode.summary_name}.json"
    assert summary.summary_file_name(f"{name}-attack-niid") == f"{mode.summary_name}-Attack-Non-IID.json"


def test_both_zeno_modes_have_summaries_of_their_own():
    assert summary.summary_file_name("zeno") == "Zeno.json"
    assert summary.summary_file_name("zeno-async") == "ZenoAsync.json"
    assert summary.algorithm_name("zeno-async") == "Zeno++"


def test_drawer_orders_and_colours_runs_by_the_catalog():
    runs = [{"mode": name, "algorithm": mode.display} for name, mode in reversed(modes.MODES.items())]

    assert [run["mode"] for run in sorted(runs, key=summary.run_order)] == list(FIGURE_ORDER)
    assert [drawer.colour_for(run["mode"], run["algorithm"]) for run in runs] == [
        mode.colour for mode in reversed(modes.MODES.values())]
    assert [run["mode"] for run in runs if drawer.is_standalone(run)] == ["local"]


@pytest.mark.parametrize("name", FIGURE_ORDER)
def test_main_leaves_the_state_server_alone_exactly_in_the_modes_that_use_it(name):
    args = config.parse_args(["-m", name, "-ip", "127.0.0.1", "-port", "10010"])

    assert bool(main.state_server_endpoints(args)) == modes.MODES[name].state_server


@pytest.mark.parametrize("name", FIGURE_ORDER)
def test_each_scheme_class_is_named_after_its_mode(name):
    assert modes.scheme_class(name).name == name


def test_the_benchmark_runs_only_catalog_modes():
    assert bench.unknown_modes(bench.FULL) == [] and bench.unknown_modes(bench.QUICK) == []
    assert bench.unknown_modes({**bench.QUICK, "modes": ["esync", "gossip"]}) == ["gossip"]  # not in the catalog


# ----------------------------------------------------------------------------------------------
# The old variant flags


@pytest.mark.parametrize("argv, mode", [
    (["-m", "async", "-dcasgd", "1"], "dcasgd"),
    (["-m", "dcasgd", "-dcasgd", "1"], "dcasgd"),
    (["-m", "async", "-dcasgd", "0"], "async"),
    (["-m", "sync", "-dcasgd", "0"], "sync"),
    (["-m", "zeno", "--zeno-flavour", "async"], "zeno-async"),
    (["-m", "zeno-async", "--zeno-flavour", "async"], "zeno-async"),
    (["-m", "zeno", "--zeno-flavour", "sync"], "zeno"),
])
def test_the_old_variant_flags_name_a_mode(argv, mode):
    assert config.parse_args(argv).mode == mode


def test_rho_defaults_by_mode():
    assert config.parse_args(["-m", "zeno"]).rho == 0.6
    assert config.parse_args(["-m", "zeno", "--zeno-flavour", "async", "-l", "0.01"]).rho == pytest.approx(0.0002)
    assert config.parse_args(["-m", "zeno-async", "-l", "0.01"]).rho == pytest.approx(0.0002)


@pytest.mark.parametrize("argv, message", [
    (["-m", "sync", "-dcasgd", "1"], "-dcasgd 1 belongs to -m async (it means -m dcasgd), not -m sync"),
    (["-m", "zeno-async", "-dcasgd", "1"], "-dcasgd 1 belongs to -m async"),
    (["-m", "async", "--zeno-flavour", "async"], "--zeno-flavour async belongs to -m zeno (it means -m zeno-async)"),
])
def test_a_variant_flag_with_another_mode_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        config.parse_args(argv)

    errors = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2
    assert len(errors) == 1 and message in errors[0]


def test_the_launcher_sets_the_mode_itself():
    with pytest.raises(checks.UsageError, match="--zeno-flavour after -- is set by the launcher"):
        experiment.parse(["--modes", "zeno", *LAUNCH_ARGS, "--", "--zeno-flavour", "async"])


# ----------------------------------------------------------------------------------------------
# The mode's own checks, as main.py reports them


@pytest.mark.parametrize("argv, num_workers, servers, message", [
    (["-m", "nbsync", "-b", "100", "--mini-batches", "8"], 2, "1", "-b 100 is not a multiple of --mini-batches 8"),
    (["-m", "zeno"], 1, "1", "-m zeno needs DMLC_NUM_WORKER >= 2"),
    (["-m", "zeno-async", "--validation-size", "10"], 3, "1", "--validation-size 10 is smaller than the batch size"),
    (["-m", "zeno-async"], 3, "2", "-m zeno-async needs each worker's whole push on one server: set DMLC_NUM_SERVER=1"),
    (["-m", "zeno", "--zeno-flavour", "async"], 3, "2", "-m zeno-async needs each worker's whole push on one server"),
    (["-m", "sync", "--update-on-servers", "--collective", "ring"], 2, "1", "leave out --collective ring"),
])
def test_main_reports_a_mode_check_as_a_usage_error(argv, num_workers, servers, message, monkeypatch):
    monkeypatch.setenv("DMLC_NUM_SERVER", servers)
    args = config.parse_args(argv)

    with pytest.raises(checks.UsageError, match=message.replace("+", r"\+")):
        checks.check_mode(modes.MODES[args.mode], args, num_workers)


def test_the_validator_flag_belongs_to_the_modes_with_a_validator(capsys):
    with pytest.raises(SystemExit):
        config.parse_args(["-m", "sync", "--validator"])
    assert "--validator belongs to -m zeno, zeno-async, not -m sync" in capsys.readouterr().err
    checks.check_byzantine(config.parse_args(["-m", "zeno-async", "--validator"]), 3)


@pytest.mark.parametrize("name", FIGURE_ORDER)
def test_each_schemes_flags_are_declared_once_and_listed_with_the_modes_that_read_them(name):
    flags = config.scheme_flags()
    help_text = config.build_parser().format_help()

    for declared in modes.MODES[name].options.__dataclass_fields__.values():
        if declared.name in flags:
            assert name in flags[declared.name].readers or declared.metadata.get("fixed")
    assert name in help_text


# ----------------------------------------------------------------------------------------------
# A mode added to the catalog


@pytest.fixture
def gossip(monkeypatch, tmp_path):
    """The gossip mode: one catalog entry and one scheme module on the import path."""
    (tmp_path / "gossip_scheme.py").write_text(textwrap.dedent(GOSSIP_SCHEME))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(modes.MODES, GOSSIP.name, GOSSIP)
    yield GOSSIP
    sys.modules.pop("gossip_scheme", None)


def test_a_mode_added_in_one_module_reaches_every_script_with_its_flag(gossip, tmp_path, capsys):
    args = config.parse_args(["-m", "gossip", "--fanout", "3"])
    assert (args.mode, args.fanout) == ("gossip", 3) and "gossip" in mode_choices()
    with pytest.raises(SystemExit):
        main.main(["--help"])
    assert "gossip a mode added in one module" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main.main(["-m", "gossip", "--help"])
    assert "the peers each worker averages its model with" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        config.parse_args(["-m", "sync", "--fanout", "3"])
    assert "--fanout belongs to -m gossip, not -m sync" in capsys.readouterr().err

    described = launch_args("sync,gossip", "--", "--fanout", "3")
    assert described.modes == ("sync", "gossip")
    gossip_argv = commands.worker_argv(described, "gossip", 0, "logs", STATE_SERVER)
    sync_argv = commands.worker_argv(described, "sync", 0, "logs", STATE_SERVER)
    assert "-port" in gossip_argv and gossip_argv[gossip_argv.index("--fanout") + 1] == "3"
    assert "--fanout" not in sync_argv and "-port" not in sync_argv
    assert modes.MODES["gossip"].synchronous and not modes.MODES["gossip"].validator

    assert summary.summary_file_name("gossip-niid") == "Gossip-Non-IID.json"
    logfactory.write_run(str(tmp_path), "gossip", nodes=("host1",), devices=("cpu",))
    logfactory.write_run(str(tmp_path), "local", nodes=("host1",), devices=("cpu",))
    run = summary.summarize_mode(str(tmp_path / logfactory.NETWORK), "gossip")
    assert run["algorithm"] == "Gossip"
    runs = drawer.load_runs(str(tmp_path / logfactory.NETWORK), 0.85)
    assert [r["mode"] for r in runs] == ["local", "gossip"]  # the catalog's order: appended last
    assert drawer.colour_for(runs[1]["mode"], runs[1]["algorithm"]) == "darkslategray"
    assert bench.unknown_modes({**bench.QUICK, "modes": ["esync", "gossip"]}) == []
