"""Recording what happens in a run and writing the run directory."""
