"""One run: launch, trainer and loop, checkpoints, the run directory, resume, stopping, summaries."""
