"""The launcher behind launch.py: one experiment, the same job under several modes on this machine (or through
MXNet's dmlc_tracker), then its summaries, figures and table.

    experiment   the command line, read once into a frozen Experiment
    checks       the checks of a command line and of an Experiment against this machine before anything starts
    parallel     the runs of a map, a table or a search on a virtual clock, several at once (--jobs)
    commands     the command lines of the workers, validator, scheduler, servers and dmlc_tracker
    runner       running each mode and the whole experiment, on loopback or on namespace hosts
    supervision  signals, exits, the PID file and the progress lines of a running mode
    results      the summaries, the figures and the table
    dmlc         the `launch.py submit` and `launch.py task` sub-programs of a dmlc_tracker job
    cluster      starting and stopping processes: state server, scheduler, servers, workers
    hosts        where a process runs: loopback or a network namespace
    netns        hosts as network namespaces joined by rate-limited links
"""
