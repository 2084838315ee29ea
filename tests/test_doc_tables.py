"""The result tables of the README and docs/ are generated from committed result files (`launch.py docs`): the
committed tables are what the generator makes of the committed results, and a block is rewritten from its folder."""
import os
import subprocess
import sys

import pytest

from analysis import doc_tables, paper, regime_map, timing, tuned
from tests.test_regimes_map import curve_reaching, write_repeats
from training.files import read_json, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_committed_tables_are_what_the_committed_results_give_and_the_check_writes_nothing():
    before = {path: os.stat(path).st_mtime_ns for path in doc_tables.documents()}
    result = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), "docs", "--check"], capture_output=True,
                            text=True, timeout=120)

    assert result.returncode == 0, f"run `python launch.py docs`: {result.stderr}"
    assert {path: os.stat(path).st_mtime_ns for path in doc_tables.documents()} == before


def a_study(root, pairs=1):
    """results/cell/ under `root`: a map of one cell, ESync, SSGD and one device, 5 repeats (`pairs` times over: 10
    make a paired verdict), and its tuned.json."""
    folder = os.path.join(root, "results", "cell")
    os.makedirs(folder)
    plan = {"network": "lenet", "dataset": "mnist-5k", "links": ["loopback"], "profiles": ["1,4"], "splits": ["iid"],
            "schemes": ["esync", "sync", "local"], "repeats": 5 * pairs, "seed": 0, "max_time": 12.0, "target": 0.85,
            "eval_seconds": 0.5}
    write_json(os.path.join(folder, regime_map.PLAN_FILE), plan)
    write_repeats(folder, plan, "esync", [curve_reaching(s) for s in (3, 4, 5, 3, 4) * pairs])
    write_repeats(folder, plan, "sync", [curve_reaching(s) for s in (9, 10, 11, 9, 10) * pairs])
    write_repeats(folder, plan, "local", [curve_reaching(s) for s in (8, 9, 10, 8, 11) * pairs])
    regime_map.write(regime_map.build(folder), folder)
    tuned.write(os.path.join(folder, tuned.FILE_NAME), "lenet/mnist-5k/1,4/loopback/iid", {
        "protocol": tuned.PROTOCOL, "target": 0.85, "holdout": 500, "max_time": 12.0, "trial_seeds": [1000, 1001],
        "commands": ["python launch.py tune --profile 1,4"], "wall_seconds": 600,
        "schemes": {"esync": {"flags": {"--local-lr": 0.004}, "values": {"local_lr": 0.004}, "robust": True,
                              "complete": 8, "pruned": 0, "failed": 0, "chosen_results": [
                                  {"seed": 1000, "time": 3.0}, {"seed": 1001, "time": 4.0}],
                              "rate_flag": "--local-lr", "largest_robust_rate": 0.008, "seed_runs": 16,
                              "diverged_runs": 2}}})
    return folder


def test_a_block_is_written_from_its_folder_and_check_sees_a_stale_one(tmp_path):
    a_study(str(tmp_path), pairs=2)
    page = "# Results\n\n<!-- generated: verdict cell -->\nold numbers\n<!-- end generated -->\n"

    fresh = doc_tables.regenerate(page, str(tmp_path))

    assert "old numbers" not in fresh and fresh.startswith(page.split("old numbers")[0])
    assert "**ESync** (--local-lr 0.004): 3.8 s (10 of 10 reached)" in fresh  # beyond the spread: a winner
    assert "**yes**: ESync (p = 0.0039)" in fresh  # 2 / 2^10, Holm over its 2 comparisons
    assert "| 0.002 |" in fresh  # the floor 10 pairs allow
    assert doc_tables.regenerate(fresh, str(tmp_path)) == fresh


def test_the_search_and_repeats_blocks_say_the_chosen_values_and_each_seeds_time(tmp_path):
    a_study(str(tmp_path))
    page = ("<!-- generated: search cell -->\n<!-- end generated -->\n"
            "<!-- generated: repeats cell -->\n<!-- end generated -->\n")

    fresh = doc_tables.regenerate(page, str(tmp_path))

    assert "| esync | 8 / 0 / 0 | --local-lr 0.004 | 3.0, 4.0 | 0.008 (0.5 of it) | 2 of 16 |" in fresh
    assert "Run by (10 minutes in all):\n\n    python launch.py tune --profile 1,4\n" in fresh
    assert "| ESync | 3.0, 4.0, 5.0, 3.0, 4.0 | 3.8 s (5 of 5 reached) | 1.00 | leader |" in fresh


def test_a_search_run_again_names_its_command_once_and_counts_the_runs():
    entries = [{"commands": ["tune --link 12", "tune --link 12", "tune --link 100"], "wall_seconds": 1200}]

    said = doc_tables.ran_by(entries, "results/cell")

    assert said == "\nRun by (20 minutes in all; 3 runs, each run again going on where it stopped):\n" \
                   "\n    tune --link 12\n    tune --link 100\n"


def test_cells_that_took_a_neighbours_values_are_one_row_each_not_their_neighbours_table_again(tmp_path):
    folder = a_study(str(tmp_path))
    path = os.path.join(folder, tuned.FILE_NAME)
    for link in ("12", "100"):
        tuned.reuse(path, "lenet/mnist-5k/1,4/loopback/iid", f"lenet/mnist-5k/1,4/{link}/iid", f"tune --link {link}")
    page = "<!-- generated: search cell -->\n<!-- end generated -->\n"

    fresh = doc_tables.regenerate(page, str(tmp_path))

    assert fresh.count("| esync | 8 / 0 / 0 |") == 1
    assert "| lenet/mnist-5k/1,4/100/iid | lenet/mnist-5k/1,4/loopback/iid | esync |" in fresh
    assert "Run by:\n\n    tune --link 12\n    tune --link 100\n" in fresh


def test_the_brief_verdict_names_the_leader_the_answer_and_the_ratio_in_a_row_a_cell_and_target(tmp_path):
    a_study(str(tmp_path), pairs=2)
    page = "<!-- generated: brief cell,cell -->\n<!-- end generated -->\n"

    fresh = doc_tables.regenerate(page, str(tmp_path))

    row = "| lenet, mnist-5k, 1,4, loopback, i.i.d., real time | 0.85 | 10 | **ESync** | **yes** | 2.42 ("
    assert fresh.count(row) == 2 and fresh.count("\n|---|") == 1


def test_the_answers_set_each_link_in_a_column_of_its_own_free_links_first_and_draw_their_figure(tmp_path):
    folder = a_study(str(tmp_path), pairs=2)
    twin = os.path.join(tmp_path, "results", "twin")
    os.makedirs(twin)
    result = read_json(os.path.join(folder, regime_map.RESULTS_FILE))
    for cell in result["cells"]:
        cell["link"] = 12.0
    write_json(os.path.join(twin, regime_map.RESULTS_FILE), result)
    page = "<!-- generated: answers twin,cell pays.png -->\n<!-- end generated -->\n"

    assert doc_tables.figures_missing(doc_tables.regenerate(page, str(tmp_path)), str(tmp_path)) == ["pays.png"]
    fresh = doc_tables.regenerate(page, str(tmp_path), draw=True)

    assert "| devices, data, clock | target | free links | R = 12 |" in fresh
    row = "| lenet, mnist-5k, 2 devices 1,4, i.i.d., real time | 0.85 | **yes**: 2.42 ("
    assert fresh.count(row) == 1 and fresh.count("against ESync |") == 2
    assert "](pays.png)\n<!-- end generated -->" in fresh and os.path.getsize(tmp_path / "pays.png") > 0
    assert doc_tables.figures_missing(fresh, str(tmp_path)) == []
    with pytest.raises(doc_tables.DocsError, match="a verdict block names a figure"):
        doc_tables.regenerate(page.replace("answers", "verdict"), str(tmp_path))
    # `map`: every study holding a map, the virtual clock's before real time, a declared one after one that was not
    assert doc_tables.regenerate(page.replace("twin,cell", "map"), str(tmp_path)) == fresh.replace("twin,cell", "map")
    write_json(os.path.join(twin, regime_map.DECLARATION_FILE), {"question": "the same cell, declared"})
    write_json(os.path.join(folder, regime_map.RESULTS_FILE), {**result, "cells": [], "clock": "virtual"})
    assert regime_map.map_studies(os.path.join(tmp_path, "results")) == [folder, twin]


def test_esync_beside_the_paper_gives_its_speedups_with_their_tests_and_several_folders_make_one_table(tmp_path):
    a_study(str(tmp_path))
    os.symlink(os.path.join(tmp_path, "results", "cell"), os.path.join(tmp_path, "results", "twin"))
    page = ("<!-- generated: beside-paper cell -->\n<!-- end generated -->\n"
            "<!-- generated: verdict cell,twin -->\n<!-- end generated -->\n")

    fresh = doc_tables.regenerate(page, str(tmp_path))

    # SSGD 9-11 s, one device 8-11 s, ESync 3-5 s (medians 10, 9 and 4), five paired seeds each
    assert "| the paper | 0.8 | – | lenet not in its Table 1 | – | 33× | 13× | 0.25 |" in fresh
    assert "| ESync | 2.50× (" in fresh and "p = 0.0079 | 2.25× (" in fresh
    verdict = fresh.split("verdict cell,twin -->")[1]
    assert verdict.count("| lenet, mnist-5k, 1,4, loopback, i.i.d., real time | 0.85 |") == 2
    assert verdict.count("\n|---|") == 1
    with pytest.raises(doc_tables.DocsError, match="a repeats block names 2 folders"):
        doc_tables.regenerate("<!-- generated: repeats cell,twin -->\n<!-- end generated -->\n",
                              str(tmp_path))


def test_a_block_of_an_unknown_kind_or_folder_is_one_line(tmp_path):
    with pytest.raises(doc_tables.DocsError, match="unknown kind 'tabel'"):
        doc_tables.regenerate("<!-- generated: tabel x -->\n<!-- end generated -->\n", str(tmp_path))
    with pytest.raises(doc_tables.DocsError, match="names x, which is not a study of results/"):
        doc_tables.regenerate("<!-- generated: verdict x -->\n<!-- end generated -->\n", str(tmp_path))


def test_the_validation_block_sets_real_and_virtual_medians_side_by_side_and_says_if_the_order_agrees(tmp_path):
    import shutil

    real = a_study(str(tmp_path))
    folder = tmp_path / "results" / "twins"
    shutil.copytree(real, folder / "real")
    shutil.copytree(real, folder / "virtual")
    page = "<!-- generated: validation twins -->\n<!-- end generated -->\n"

    fresh = doc_tables.regenerate(page, str(tmp_path))

    assert "| ESync | 4.0 s (5 of 5 reached) | 4.0 s (5 of 5 reached) |" in fresh and "| yes |" in fresh


def test_a_command_shown_reads_the_values_committed_beside_its_results(tmp_path):
    folder = tmp_path / "cell"
    folder.mkdir()
    ran = "python launch.py regimes --tuned /where/the/search/ran/tuned.json --links 12 --repeats 10"
    kept_elsewhere = ran + " -ld /where/the/runs/ran/map-64/ --resume"

    without = doc_tables.with_committed_values(ran, str(folder))
    (folder / "tuned.json").write_text("{}")
    shown = doc_tables.with_committed_values(ran, str(folder))

    assert without == ran
    assert shown == f"python launch.py regimes --tuned {folder / 'tuned.json'} --links 12 --repeats 10"
    assert doc_tables.with_committed_values(kept_elsewhere, str(folder)) == shown + " -ld logs/map-64 --resume"
    assert doc_tables.with_committed_values(ran + " -ld logs/map", str(folder)) == shown + " -ld logs/map"
    in_the_clone = ran + f" --log-dir {doc_tables.ROOT}/logs/map"
    assert doc_tables.with_committed_values(in_the_clone, str(folder)) == shown + " --log-dir logs/map"


def test_a_table1_block_is_the_papers_table_with_the_commands_wall_time_and_committed_values(tmp_path):
    folder = tmp_path / "results" / "table1"
    folder.mkdir(parents=True)
    argv = ["--tuned", "/where/the/search/ran/tuned.json", "--repeats", "10"]
    timing.record(str(folder), "paper", argv, 1500.4, resumed=False)
    timing.record(str(folder), "paper", argv + ["--resume"], 899.8, resumed=True)  # a resumed command adds its own
    (folder / tuned.FILE_NAME).write_text("{}")
    report = {"network": "lenet", "dataset": "fashion-mnist", "repeats": [1, 2], "seeds": [0, 1], "links": [],
              "target": 0.8, "splits": [], **timing.read(str(folder))}
    write_json(str(folder / paper.RESULTS_FILE), report)

    fresh = doc_tables.regenerate("<!-- generated: table1 table1 -->\n<!-- end generated -->\n", str(tmp_path))

    assert fresh.startswith("<!-- generated: table1 table1 -->\n#### Table 1: lenet on fashion-mnist, 2 repeats")
    assert (f"Run by (40 minutes):\n\n    python launch.py paper --tuned {folder / tuned.FILE_NAME} --repeats 10 "
            "--resume\n") in fresh


def test_a_virtual_cell_with_costly_links_is_marked_with_the_link_model_its_runs_recorded():
    def cell(virtual, link, servers, sums=()):
        return {"virtual": virtual, "link": link, "schemes": {"sync": {"servers": servers, "sums": list(sums)},
                                                              "local": {}}}

    assert doc_tables.earlier_model(cell(True, 12.0, [])) == " †"           # no servers recorded: the first model
    assert doc_tables.earlier_model(cell(True, 12.0, [1])) == " ‡"          # fair links, sums not pipelined
    assert doc_tables.earlier_model(cell(True, 12.0, [1], ["pipelined per key"])) == ""
    assert doc_tables.earlier_model(cell(True, "loopback", [])) == ""       # free links: every model charges nothing
    assert doc_tables.earlier_model(cell(False, 12.0, [])) == ""            # real time: nothing charged


def test_the_verdict_in_words_counts_the_cells_that_carry_one_and_says_what_they_read(tmp_path):
    a_study(str(tmp_path), pairs=2)
    page = "<!-- generated: answers-text cell -->\n<!-- end generated -->\n"

    fresh = doc_tables.regenerate(page, str(tmp_path))

    assert "1 of the 1 cells and targets above carry a verdict (10 or more paired repeats)" in fresh
    assert "On free links the cells read yes in 1 (sooner than one device: ESync)." in fresh
