"""The launcher's commands of many runs: `paper` (the ESync paper's experiment), `regimes` (the map of which scheme
wins where) and the schemes it runs, `tune` (each scheme's search), `sweep` (one experiment per value of a flag), and
how they run several runs at once on the virtual clock (`--jobs N`)."""
