"""The benchmark's quick mode produces every section of its table (how fast is the full run's business)."""
import json
import subprocess
import sys

from cluster import ROOT


def test_quick_benchmark_writes_every_section(tmp_path):
    result = subprocess.run([sys.executable, "bench/run.py", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)

    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["network"] for r in results["sync_overhead"]] == ["lenet"]
    assert all(r["ours"] > 0 and r["trainer"] > 0 for r in results["sync_overhead"])
    assert {r["mode"] for r in results["heterogeneity"]} == {"esync", "esync-plan", "sync", "async", "dcasgd", "nbsync"}
    assert all(0 < r["efficiency"] and r["bytes_per_s_per_worker"] > 0 for r in results["heterogeneity"])
    assert results["state_server"]["p99_ms"] >= results["state_server"]["p50_ms"] > 0
    assert set(results["state_server"]["share"]) == {"apply", "plan"}
    assert {(r["mode"], r["attacker"]) for r in results["byzantine"]} == {("zeno", False), ("zeno", True),
                                                                          ("sync", True)}
    network = results["network"]
    if "skipped" not in network:  # namespaces need root
        expected = {("lenet", mode) for mode in ("sync", "async", "esync")}
        assert {(r["network"], r["mode"]) for r in network["rows"]} == expected
        assert all(r["samples_per_s"] > 0 and 0 < r["ps_link_peak_utilisation"] < 1.05 for r in network["rows"])
    table = (tmp_path / "results.md").read_text()
    for heading in ("Sync overhead", "Heterogeneity", "State server", "Byzantine workers", "Network"):
        assert heading in table
