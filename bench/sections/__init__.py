"""The benchmark's sections (bench/run.py runs them): each module's `measure(cfg, workdir, earlier)` returns its
results, `earlier` holding the sections that ran before it, and its `markdown(results)` the lines of its table."""
