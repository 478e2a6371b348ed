"""Recording what happens in a run, writing the run directory, and reading run directories back (runs, report)."""
