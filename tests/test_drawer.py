"""drawer.py: figures and table from synthetic runs, run as a real subprocess."""
import json
import os
import struct
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot  # noqa: E402
import pytest  # noqa: E402

from analysis import figures as drawer  # noqa: E402
from analysis import paper_figures, summary  # noqa: E402
from tests import logfactory  # noqa: E402
from tests.logfactory import MODES, NETWORK  # noqa: E402
from training import runlog  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAWER_SCRIPT = os.path.join(ROOT, "drawer.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IID_FIGURES = ("accuracy_vs_time", "throughput", "traffic", "compute_ratio")
ALL_FIGURES = IID_FIGURES + ("accuracy_vs_time_non_iid",)


def run_drawer(*args):
    return subprocess.run([sys.executable, DRAWER_SCRIPT, *args], capture_output=True, text=True, timeout=120)


def png_size(path):
    """(width, height) from the IHDR chunk, which always follows the signature."""
    with open(path, "rb") as handle:
        header = handle.read(24)
    assert header[:8] == PNG_SIGNATURE and header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def assert_real_png(path):
    width, height = png_size(path)
    assert width >= 300 and height >= 300
    assert os.path.getsize(path) > 5000
    assert matplotlib.image.imread(path).std() > 0


def figure_path(outdir, stem, extension="png"):
    return os.path.join(outdir, f"{stem}.{extension}")


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """Four i.i.d. and two non-i.i.d. runs, not yet summarized, drawn once with --pdf."""
    base = str(tmp_path_factory.mktemp("logs"))
    logfactory.write_runs(base, modes=MODES + ("esync-niid", "sync-niid"))
    result = run_drawer("-b", base, "-n", NETWORK, "--pdf")
    return base, os.path.join(base, NETWORK, "figures"), result


def test_drawer_succeeds(drawn):
    _, _, result = drawn

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("stem", ALL_FIGURES)
def test_every_figure_is_a_real_png(drawn, stem):
    _, outdir, _ = drawn

    assert_real_png(figure_path(outdir, stem))


@pytest.mark.parametrize("stem", ALL_FIGURES)
def test_pdf_is_written_beside_each_png(drawn, stem):
    _, outdir, _ = drawn

    with open(figure_path(outdir, stem, "pdf"), "rb") as handle:
        assert handle.read(5) == b"%PDF-"


def test_written_paths_are_printed(drawn):
    _, outdir, result = drawn

    printed = set(result.stdout.split())

    assert {figure_path(outdir, stem) for stem in ALL_FIGURES} <= printed


def test_missing_summaries_are_produced_from_logs(drawn):
    base, _, _ = drawn

    names = ["ESync.json", "Sync.json", "Async.json", "DCASGD.json"]

    assert all(os.path.exists(os.path.join(base, NETWORK, mode, name)) for mode, name in zip(MODES, names))


def test_table_shows_each_algorithm_with_its_throughput(drawn):
    base, _, result = drawn
    with open(os.path.join(base, NETWORK, "esync-niid", "ESync-Non-IID.json"), encoding="utf-8") as handle:
        esync_non_iid = json.load(handle)

    rows = {line.split("  ")[0].strip(): line for line in result.stdout.splitlines()}

    assert {"ESync", "Sync", "Async", "DCASGD", "ESync (non-IID)", "Sync (non-IID)"} <= rows.keys()
    assert f"{esync_non_iid['cluster_throughput']:.1f}" in rows["ESync (non-IID)"]


def test_a_run_with_byzantine_workers_is_labelled_and_ordered_after_its_clean_run():
    clean = {"algorithm": "Zeno", "mode": "zeno"}
    attacked = {"algorithm": "Zeno", "mode": "zeno-attack", "attacked": True, "byzantine_workers": 1}

    assert drawer.run_label(attacked) == "Zeno (1 Byzantine)"
    assert sorted([attacked, clean], key=summary.run_order) == [clean, attacked]


def test_a_slow_device_is_labelled_with_how_much_slower_it_is(tmp_path):
    """The demo's three workers on one host, the last one emulated 4x slower (its meta.json says so): the compute
    ratio figure names it with its factor, in the words of the paper's Figure 5."""
    logfactory.write_run(str(tmp_path), "esync", nodes=("vm",), devices=("cpu",) * 3)
    for rank, slowdown in enumerate((1, 1, 4)):
        meta_path = tmp_path / NETWORK / "esync" / "vm" / f"cpu-rank{rank}" / "meta.json"
        meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "slowdown": slowdown}))
    run = summary.summarize_mode(str(tmp_path / NETWORK), "esync")

    fig = drawer.draw_compute_ratio([run], NETWORK)
    labels = [label.get_text() for label in fig.axes[0].get_xticklabels()]
    matplotlib.pyplot.close(fig)

    assert labels == ["vm/cpu-rank0", "vm/cpu-rank1", "vm/cpu-rank2 (4× slower)"]
    assert paper_figures.device_labels({"esync": [run]})[-1].startswith("3: cpu\n(4× slower)\n")


def test_single_algorithm_is_drawn_without_non_iid_figure(tmp_path):
    logfactory.write_run(str(tmp_path), "async")
    outdir = str(tmp_path / "figures")

    result = run_drawer("-b", str(tmp_path), "-n", NETWORK, "-o", outdir)

    assert result.returncode == 0, result.stderr
    for stem in IID_FIGURES:
        assert_real_png(figure_path(outdir, stem))
    assert not os.path.exists(figure_path(outdir, "accuracy_vs_time_non_iid"))


def test_original_layout_is_drawn(tmp_path):
    for mode in ("esync", "sync"):
        logfactory.write_run(str(tmp_path), mode, nodes=logfactory.ORIGINAL_NODES, original=True)
    outdir = str(tmp_path / "figures")

    result = run_drawer("-b", str(tmp_path), "-n", NETWORK, "-o", outdir, "--num-params", "1000")

    assert result.returncode == 0, result.stderr
    for stem in IID_FIGURES:
        assert_real_png(figure_path(outdir, stem))


def test_wrong_base_folder_exits_2_with_one_line_message(tmp_path):
    result = run_drawer("-b", str(tmp_path / "nowhere"), "-n", NETWORK)

    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_empty_network_folder_exits_2(tmp_path):
    os.makedirs(tmp_path / NETWORK)

    result = run_drawer("-b", str(tmp_path), "-n", NETWORK)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"drawer.py: error: no summaries or iteration logs under {tmp_path / NETWORK}"]


# ----------------------------------------------------------------------------------------------
# Pure helpers


def test_moving_average_keeps_length_and_averages_trailing_window():
    assert drawer.moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


def test_every_kth_keeps_the_last_point():
    assert drawer.every_kth([0, 1, 2, 3, 4, 5], 4) == [0, 4, 5]


def test_standalone_accuracy_prefers_the_command_line():
    runs = [{"mode": "local", "best_accuracy": 0.9}]

    assert drawer.standalone_accuracy(runs, 0.95) == 0.95


def test_standalone_accuracy_falls_back_to_the_local_run():
    runs = [{"mode": "sync", "best_accuracy": 0.8}, {"mode": "local", "best_accuracy": 0.9}]

    assert drawer.standalone_accuracy(runs) == 0.9


def test_a_time_axis_says_virtual_seconds_for_runs_on_a_virtual_clock():
    assert drawer.time_axis([{"clock": {"kind": runlog.VIRTUAL_CLOCK}}, {}], "s") == "virtual time (s)"
    assert drawer.time_axis([{"clock": {"kind": runlog.REAL_CLOCK}}, {}], "minutes") == "wall-clock time (minutes)"
