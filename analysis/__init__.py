"""From run logs to results: per-run summaries (summary.py), the paper's figures and the comparison table
(figures.py)."""
