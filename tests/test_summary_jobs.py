"""summary.py summarizes one job, whole: a run missing a worker's folder, or holding another job's, is refused in one
line naming it; --partial summarizes what is there and says so."""
import os

from tests import logfactory
from tests.logfactory import NETWORK
from tests.test_summary import SUMMARY_NAMES, load_summary, run_summary


def one_error_line(result):
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    return lines[0]


def emptied(base, node, folder):
    """A worker's folder of a sync run with its files removed; its path."""
    path = os.path.join(base, NETWORK, "sync", node, folder)
    for name in os.listdir(path):
        os.remove(os.path.join(path, name))
    return path


def test_a_run_missing_a_workers_folder_is_refused_in_one_line_naming_the_worker(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync")
    os.rmdir(emptied(base, "host2", "gpu0-rank4"))

    line = one_error_line(run_summary("-b", base, "-n", NETWORK, "-m", "sync"))

    assert "worker 4 of the job's 6" in line and "--partial" in line
    assert not os.path.exists(os.path.join(base, NETWORK, "sync", SUMMARY_NAMES["sync"]))


def test_a_partial_run_is_summarized_when_asked_and_says_so_in_the_json_and_its_label(tmp_path):
    from analysis import figures

    base = str(tmp_path)
    logfactory.write_run(base, "sync")
    emptied(base, "host1", "cpu-rank0")

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync", "--partial")
    run = load_summary(base, "sync")

    assert result.returncode == 0, result.stderr
    assert run["partial"] == {"workers": 5, "of": 6, "missing": [0]}
    assert figures.run_label(run) == "Sync (partial: 5 of 6 workers)"


def test_folders_of_two_jobs_mixed_in_one_run_are_refused_in_one_line_naming_both(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync", job_id="first")
    other = str(tmp_path / "other")
    logfactory.write_run(other, "sync", nodes=("host3",), job_id="second")
    os.rename(os.path.join(other, NETWORK, "sync", "host3"), os.path.join(base, NETWORK, "sync", "host3"))

    line = one_error_line(run_summary("-b", base, "-n", NETWORK, "-m", "sync"))

    assert "mixes the logs of 2 jobs" in line and "job second of 3 workers: host3/cpu-rank0" in line
    assert "job first of 6 workers" in line


def test_a_folder_left_by_an_earlier_larger_run_is_refused_as_a_foreign_worker(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync", nodes=("host1",))  # 3 workers, then a stray 4th with the same job's count
    stray = os.path.join(base, NETWORK, "sync", "host1", "cpu-rank3")
    os.rename(os.path.join(base, NETWORK, "sync", "host1", "gpu1-rank2"), stray)
    logfactory.write_run(str(tmp_path / "again"), "sync", nodes=("host1",))
    os.rename(os.path.join(tmp_path, "again", NETWORK, "sync", "host1", "gpu1-rank2"),
              os.path.join(base, NETWORK, "sync", "host1", "gpu1-rank2"))

    line = one_error_line(run_summary("-b", base, "-n", NETWORK, "-m", "sync"))

    assert "host1/cpu-rank3" in line and "position outside 0-2" in line


def test_a_folder_without_meta_json_beside_workers_that_have_one_is_refused_unless_partial(tmp_path):
    base = str(tmp_path)
    logfactory.write_run(base, "sync")
    os.remove(os.path.join(base, NETWORK, "sync", "host1", "cpu-rank0", "meta.json"))

    line = one_error_line(run_summary("-b", base, "-n", NETWORK, "-m", "sync"))
    partial = run_summary("-b", base, "-n", NETWORK, "-m", "sync", "--partial")

    assert "host1/cpu-rank0 has no meta.json beside workers that do" in line and "--partial" in line
    assert partial.returncode == 0, partial.stderr
