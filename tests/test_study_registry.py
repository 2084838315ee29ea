"""The studies' registry (launcher/studies/registry.py): a study runs by its name only as committed, its results kept
beside its declaration, and a changed study is a new one."""
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from launcher.cluster import ROOT
from launcher.studies import cost, kept, registry
from tests.test_launch import launcher_env
from training.checks import UsageError
from training.faults.failures import EXIT_INTERRUPTED

MAP = ("python launch.py regimes --clock virtual --step-seconds 0.01 --links 12 --profiles 1,4 --splits iid "
       f"--schemes {{schemes}} --repeats 1 --max-time 1 --snapshot-seconds 0.5 --higher-targets '' --no-figures "
       f"--dataset mnist-5k -dd {os.path.join(ROOT, 'data')} -ld logs/tiny -- -b 16")


def git(root, *argv):
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *argv], check=True,
                   capture_output=True)


def declare(root, name, schemes="local,sync", commit=True):
    folder = root / registry.RESULTS / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / registry.DECLARATION).write_text(json.dumps({"question": "?", "command": MAP.format(schemes=schemes)}))
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-qm", f"declare {name}")


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    return tmp_path


def test_a_study_not_committed_as_it_stands_is_refused_before_anything_runs(repo):
    declare(repo, "tiny", commit=False)

    with pytest.raises(UsageError, match="is not committed as it stands: commit the declaration"):
        registry.run_study("tiny", resume=False, root=str(repo))
    assert not (repo / "logs").exists()


def test_an_unknown_study_or_one_that_runs_no_launcher_command_is_one_line(repo):
    with pytest.raises(UsageError, match="no study 'none'"):
        registry.declared("none", root=str(repo))
    (repo / registry.RESULTS / "odd").mkdir(parents=True)
    (repo / registry.RESULTS / "odd" / registry.DECLARATION).write_text(json.dumps({"command": "python launch.py x"}))
    with pytest.raises(UsageError, match="a study runs launch.py regimes or tune or calibrate or noise-scale"):
        registry.run_study("odd", resume=False, root=str(repo))
    for listing_with in (["--resume"], ["--keep-every", "5"]):
        with pytest.raises(UsageError, match="--resume and --keep-every are for running a study: give its name"):
            registry.parse([*listing_with, "--root", str(repo)])


@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_a_committed_study_runs_as_declared_keeps_its_results_and_a_changed_one_is_a_new_study(repo):
    declare(repo, "tiny")

    code = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), "study", "tiny", "--root", str(repo)],
                          env=launcher_env(), capture_output=True, text=True, timeout=300)
    assert code.returncode == 0, code.stdout[-2000:] + code.stderr[-2000:]
    folder = repo / registry.RESULTS / "tiny"
    assert all((folder / name).is_file() for name in registry.KEPT)
    assert json.loads((folder / "regimes.json").read_text())["schemes"] == ["local", "sync"]
    readme = (folder / "README.md").read_text()  # the blocks launch.py docs fills
    assert "<!-- generated: verdict tiny -->" in readme and "<!-- generated: repeats tiny -->" in readme
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "results")
    assert registry.listing(str(repo))[0].startswith("tiny: run, declared before its results; 2 runs")

    declare(repo, "tiny", schemes="local,sync,esync")  # an arm added after the results
    with pytest.raises(UsageError, match="holds results of .* declare the changed study anew"):
        registry.run_study("tiny", resume=False, root=str(repo))
    (repo / registry.RESULTS / "tiny-v2").mkdir()
    (repo / registry.RESULTS / "tiny-v2" / registry.DECLARATION).write_text(json.dumps(
        {"supersedes": "tiny", "command": MAP.format(schemes="local,sync,esync")}))
    assert registry.listing(str(repo))[0].endswith("; superseded by tiny-v2")
    assert registry.listing(str(repo))[1].startswith("tiny-v2: declared, not run")
    table = registry.studies_block(*(str(repo / registry.RESULTS / name) for name in ("tiny", "tiny-v2")))
    # hours of this machine at the pace of the map run here: its wall time over its 2 s of training budgets
    assert re.search(r"\| \[tiny\]\(tiny/\) \| run, declared before its results \| 3 \| 0.0 \| \d+\.\d \| tiny-v2 \|",
                     table)
    assert re.search(r"\| \[tiny-v2\]\(tiny-v2/\) \| declared, not run \| 3 \| 0.0 \| \d+\.\d \| – \|", table)


SEARCH = ("python launch.py tune --clock virtual --step-seconds 0.01 --link 12 --profile 1,4 --schemes sync@ring "
          "--until 1 --trial-seeds 1 --max-time 1 --snapshot-seconds 0.5 --target 0.5 --holdout 100 --dataset mnist-5k "
          f"-dd {os.path.join(ROOT, 'data')} -ld logs/search")


def test_a_searchs_progress_counts_each_widening_of_a_range_as_trials_more_to_run(repo):
    schemes = {"a": {"complete": 20, "pruned": 4, "widenings": [{"ranges": "-gl ...", "ended": 8}],  # 16 + 8 of 16
                     "trial_seconds": 8640},
               "b": {"complete": 10, "pruned": 6, "trial_seconds": 5760}}
    (repo / registry.RESULTS / "search").mkdir(parents=True)
    (repo / registry.RESULTS / "search" / "tuned.json").write_text(json.dumps(
        {"cells": {"c": {"wall_seconds": 14400, "schemes": schemes}}}))

    said = registry.search_progress("search", [["tune", "--schemes", "a,b,c", "--until", "16"]], str(repo))

    assert said == "40 of 64 trials (1 widened), 1 of its 3 schemes done, about 2.4 h more"  # 360 s a trial


def test_a_search_carried_over_from_an_earlier_store_is_paced_by_its_trials_own_times_not_its_runs(repo):
    # 100 trials ended, 4 of them in this study's own run of 1,000 s: its wall time says nothing of the other 96
    schemes = {"a": {"complete": 100, "pruned": 0, "trial_seconds": 25000}, "b": {"complete": 0, "pruned": 0}}
    (repo / registry.RESULTS / "search").mkdir(parents=True)
    (repo / registry.RESULTS / "search" / "tuned.json").write_text(json.dumps(
        {"cells": {"c": {"wall_seconds": 1000, "schemes": schemes}}}))

    said = registry.search_progress("search", [["tune", "--schemes", "a,b", "--until", "100"]], str(repo))

    assert said == "100 of 200 trials, 1 of its 2 schemes done, about 6.9 h more"  # 250 s a trial
    del schemes["a"]["trial_seconds"]
    (repo / registry.RESULTS / "search" / "tuned.json").write_text(json.dumps({"cells": {"c": {
        "wall_seconds": 1000, "schemes": schemes}}}))
    assert registry.search_progress("search", [["tune", "--schemes", "a,b", "--until", "100"]], str(repo)) == \
        "100 of 200 trials, 1 of its 2 schemes done"  # no trial's own time: no pace


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_a_search_study_keeps_its_values_and_run_again_runs_only_the_trials_it_lacks(repo):
    (repo / registry.RESULTS / "search").mkdir(parents=True)
    (repo / registry.RESULTS / "search" / registry.DECLARATION).write_text(json.dumps({"command": SEARCH}))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "declare search")

    assert registry.listing(str(repo)) == ["search: declared, not run; 1 runs, 0.0 h of training budgets"]
    outputs = []
    for _ in range(2):
        ran = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), "study", "search", "--root", str(repo)],
                             env=launcher_env(), capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        outputs.append(ran.stdout)
        shutil.rmtree(repo / "logs")  # as a fresh clone has none: the kept trials go back into it

    assert "sync@ring: 0 trials ended before, 1 more" in outputs[0] and "sync@ring: 1 trials ended before, 0 more" in outputs[1]
    (cell,) = json.loads((repo / registry.RESULTS / "search" / "tuned.json").read_text())["cells"].values()
    found = cell["schemes"]["sync@ring"]
    assert found["trials"] - len(found["widenings"]) == 1  # one trial; a widening of a range may add one
    assert (repo / registry.RESULTS / "search" / "tuned.md").is_file()
    assert kept.stored_trials(repo / registry.RESULTS / "search" / kept.SEARCH_STORE) == found["trials"]
    assert "<!-- generated: search search -->" in (repo / registry.RESULTS / "search" / "README.md").read_text()
    assert registry.listing(str(repo))[0].startswith(
        "search: declared, in progress (its search at 1 of 1 trials, 1 of its 1 schemes done)")
    assert "done: `python launch.py docs` writes its README" in outputs[1]
    (repo / registry.RESULTS / "search" / registry.DECLARATION).write_text(json.dumps({"command": SEARCH.replace(
        "--until 1", "--until 2")}))  # a trial more, declared after the results
    git(repo, "commit", "-qam", "more trials")
    with pytest.raises(UsageError, match="holds results of .* declare the changed study anew"):
        registry.run_study("search", resume=False, root=str(repo))


def store_with(path, trials):
    import optuna

    study = optuna.create_study(storage=f"sqlite:///{path}", study_name="c|sync")
    for _ in range(trials):
        study.tell(study.ask(), 1.0)


def test_a_kept_search_goes_on_only_from_its_kept_trials_else_it_is_refused_before_anything_runs(repo):
    folder = repo / registry.RESULTS / "search"
    folder.mkdir(parents=True)
    (folder / registry.DECLARATION).write_text(json.dumps({"command": SEARCH}))
    (folder / "tuned.json").write_text(json.dumps({"cells": {"c": {"commands": [SEARCH], "schemes": {}}}}))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a search whose trials are not kept")
    with pytest.raises(UsageError, match=r"holds a search whose trials \(studies.db\) are in neither results/search/ "
                                         "nor logs/search/: it cannot go on where it stopped"):
        registry.run_study("search", resume=False, root=str(repo))

    store_with(folder / kept.SEARCH_STORE, 2)
    (repo / "logs" / "search").mkdir(parents=True)
    store_with(repo / "logs" / "search" / kept.SEARCH_STORE, 1)
    with pytest.raises(UsageError, match="logs/search/studies.db holds 1 trials, results/search/studies.db 2: move "
                                         "logs/search/ away to go on from the kept ones"):
        registry.run_study("search", resume=False, root=str(repo))
    assert not (repo / "logs" / "search" / "tuned.json").exists()  # refused before anything was put back

    (repo / "logs" / "search" / kept.SEARCH_STORE).write_text("not a store")
    with pytest.raises(UsageError, match="logs/search/studies.db: not a search's store of trials"):
        registry.run_study("search", resume=False, root=str(repo))

    shutil.rmtree(repo / "logs")
    kept.restore_search("search", shlex.split(SEARCH)[2:], str(repo))
    assert kept.stored_trials(repo / "logs" / "search" / kept.SEARCH_STORE) == 2
    assert (repo / "logs" / "search" / "tuned.json").read_bytes() == (folder / "tuned.json").read_bytes()


def test_a_verdict_study_runs_every_rival_or_says_why_each_is_left_out(repo):
    declaration = {"verdict": True, "command": MAP.format(schemes="local,sync,esync-apply@ring")}
    maps = [argv for argv in registry.commands_of(declaration)]

    missing = registry.missing_rivals(declaration, maps)
    assert "esync-apply" not in missing and "diloco" in missing and "local" not in missing
    with pytest.raises(UsageError, match="declared a verdict study but runs neither .*diloco"):
        registry.check_rivals("tiny", declaration, maps)
    registry.check_rivals("tiny", {**declaration, "left_out": dict.fromkeys(missing, "not in this cell")}, maps)
    # where links cost, each synchronous scheme also over the ring; each of local steps also on the fast devices
    local_steps = {"verdict": True, "command": MAP.format(schemes="local,sync,diloco,fast-only@ring")}
    missing = registry.missing_rivals(local_steps, list(registry.commands_of(local_steps)))
    assert {"sync@ring", "diloco@ring", "fast:diloco"} <= set(missing) and "fast-only" not in missing
    assert cost.size_of(maps) == (3, 3.0)  # one cell, three schemes, one repeat of 1 s


@pytest.mark.beside_others("in-process")  # one short process whose output does not depend on timing
def test_a_listing_whose_reader_leaves_early_ends_in_exit_1_without_a_traceback():
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "launch.py"), "study"], cwd=ROOT, env=launcher_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `launch.py study | head -1` does once it has its line; here before the first
    _, errors = proc.communicate(timeout=120)

    assert proc.returncode == 1 and errors.decode() == ""


def test_a_studys_hours_of_this_machine_follow_the_pace_of_the_maps_and_searches_of_its_network_and_clock_run_here(tmp_path):
    timed = tmp_path / registry.RESULTS / "timed"
    timed.mkdir(parents=True)  # two runs of 1 s of lenet on the virtual clock took 30 s here
    (timed / "timing.json").write_text(json.dumps({"command": MAP.format(schemes="local,sync"), "wall_seconds": 30}))
    (timed / "paper").mkdir()  # a paper's table is no map: its time says nothing of a run's
    (timed / "paper" / "timing.json").write_text(json.dumps({"command": "python launch.py paper", "wall_seconds": 9}))

    paces = cost.paces(str(tmp_path / registry.RESULTS))

    assert paces == {("regimes", "lenet", "virtual"): 15.0}
    three = registry.commands_of({"command": MAP.format(schemes="local,sync,esync")})
    assert cost.machine_hours(three, paces) == 3 * 15.0 / 3600
    search = registry.commands_of({"command": SEARCH})  # one run of 1 s
    assert cost.machine_hours(search, paces) == 15.0 / 3600  # no search has run here: at its maps' pace
    (timed / "tuned.json").write_text(json.dumps({"cells": {"c": {  # 4 seeds' runs of 1 s in 20 s of trials
        "commands": [SEARCH], "max_time": 1.0, "schemes": {"sync": {"trial_seconds": 20, "seed_runs": 4},
                                                           "async": {"seed_runs": 8}}}}}))  # no times: not counted
    paces = cost.paces(str(tmp_path / registry.RESULTS))
    assert paces == {("regimes", "lenet", "virtual"): 15.0, ("tune", "lenet", "virtual"): 5.0}
    assert cost.machine_hours(search + three, paces) == (5.0 + 3 * 15.0) / 3600
    resnet = registry.commands_of({"command": MAP.format(schemes="local").replace("--links", "-n resnet18-v1 --links")})
    assert cost.machine_hours(three + resnet, paces) is None  # no map of resnet18-v1 has run here
    for network, step in (("lenet", 0.02), ("resnet18-v1", 0.5)):  # as launch.py calibrate measured their steps
        (timed / f"calibration-{network}.json").write_text(json.dumps({"network": network, "step_seconds": step}))
    paces = cost.paces(str(tmp_path / registry.RESULTS))
    assert paces[("regimes", "resnet18-v1", "virtual")] == pytest.approx(15.0 * 25)  # lenet's pace, 25 times its step
    assert cost.machine_hours(three + resnet, paces) == pytest.approx((3 * 15.0 + 15.0 * 25) / 3600)


def processes_in(folder):
    """PIDs of the processes working in `folder` or naming it on their command line."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(str(folder)) or str(folder) in cmdline:
            found.append(int(pid))
    return found


def ignore_interrupts():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.beside_others  # a virtual clock's runs; the test waits on their stop
def test_an_interrupted_study_stops_its_command_which_keeps_what_it_wrote_and_leaves_no_process(repo):
    long_search = SEARCH.replace("--max-time 1", "--max-time 120").replace("--until 1", "--until 3").replace(
        "--trial-seeds 1", "--trial-seeds 2 --jobs 2")  # its seeds' runs in processes of their own
    (repo / registry.RESULTS / "search").mkdir(parents=True)
    (repo / registry.RESULTS / "search" / registry.DECLARATION).write_text(json.dumps({"command": long_search}))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "declare search")
    study = subprocess.Popen([sys.executable, os.path.join(ROOT, "launch.py"), "study", "search", "--root", str(repo),
                              "--keep-every", "0.5"],
                             env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=ignore_interrupts)  # as a script's background job starts: `kill -INT` works
    kept_store = repo / registry.RESULTS / "search" / kept.SEARCH_STORE
    try:
        lines = []
        for line in study.stdout:  # until the first trial's run is in flight
            lines.append(line)
            if "[tune] sync@ring: 0 trials ended before" in line:
                break
        for _ in range(120):  # the search's trials are kept while it runs
            if kept_store.exists() or study.poll() is not None:
                break
            time.sleep(0.5)
        assert kept_store.exists() and study.poll() is None
        time.sleep(1)
        study.send_signal(signal.SIGINT)  # to the study alone, as `kill -INT` does; a terminal's Ctrl-C reaches it too
        rest = study.communicate(timeout=120)[0]
    finally:
        for pid in [study.pid, *processes_in(repo)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    assert study.returncode == EXIT_INTERRUPTED, "".join(lines) + rest
    assert "[study] interrupted: `launch.py tune` stops its runs in flight" in rest and "Traceback" not in rest
    assert processes_in(repo) == []
