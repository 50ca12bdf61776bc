"""The engines: who the workers are and how they start, the hardware, and what each worker prints."""
