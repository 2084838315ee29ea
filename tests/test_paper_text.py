"""Table 1 as text beside the paper's own figures (analysis/paper_text.py)."""
import os

from analysis import paper, paper_text
from analysis import summary as summaries
from tests.test_paper import TARGET, run
from training.files import write_json


def test_esync_stands_beside_the_papers_own_figures_for_its_network(tmp_path):
    network_dir = os.path.join(str(tmp_path), "repeat-1", "resnet18-v1")
    for folder, accuracies, speed, traffic in (("esync", [0.85, 0.9], 3300.0, 1.0), ("sync", [0.5, 0.82], 100.0, 2.0),
                                               ("async", [0.6, 0.81], 330.0, 4.0), ("local", [0.7, 0.9], 50.0, 0.0)):
        summary = {**run([1.0, 2.0], accuracies, speed, traffic), "mode": folder, "links": "loopback (no link limit)"}
        os.makedirs(os.path.join(network_dir, folder))
        write_json(summaries.summary_path(network_dir, folder), summary)
    description = {"dataset": "fashion-mnist", "seeds": [0], "esync_policy": "apply"}

    report, _ = paper.build_report(str(tmp_path), "resnet18-v1", ("esync", "sync", "async"), [1], TARGET,
                                   description, splits=("iid",))

    text = paper_text.format_report(report)
    assert "| the paper | 7× | 33× | 13× | 0.25 |" in text
    assert "| 2.0× | 33.0× | 10.0× | 0.25 |" in text  # 0.8 at 1 s against SSGD's 2 s; 3300 / 100; 3300 / 330; 1 / 4


def test_a_run_stopped_as_diverged_counts_at_the_budget_and_the_table_says_so(tmp_path):
    network_dir = os.path.join(str(tmp_path), "repeat-1", "lenet")
    diverged = {**run([1.0, 2.0], [0.1, 0.1]), "diverged": "test accuracy at chance"}  # stopped at 2 s of 60
    for folder, summary in (("esync", run([1.0, 10.0], [0.5, 0.85])), ("sync", diverged),
                            ("local", run([1.0, 2.0], [0.7, 0.9]))):
        os.makedirs(os.path.join(network_dir, folder))
        write_json(summaries.summary_path(network_dir, folder), {**summary, "mode": folder})

    report, _ = paper.build_report(str(tmp_path), "lenet", ("esync", "sync"), [1], TARGET,
                                   {"dataset": "fashion-mnist", "seeds": [0], "max_time": 60.0}, splits=("iid",))

    cell = report["cells"]["iid"]
    assert cell["sync"]["time_to_target"]["values"] == [60.0]  # not the 2 s it trained: it would never have reached
    assert cell["esync"]["speedup"]["values"] == [6.0]  # a lower bound: the budget over ESync's 10 s
    assert "| ≥ 60.0 (0 of 1 reached, 1 diverged) |" in paper_text.format_report(report)
