"""One run: launch, the trainer and its loop, checkpoints, the run directory, resume, stopping, summaries."""
