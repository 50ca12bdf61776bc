"""The engines: who the workers are and how they start, the hardware, what each worker prints."""
