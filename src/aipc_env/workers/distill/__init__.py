"""The distillation worker's torch side: its stages, gates, the Euler sampler, the student, the tiny 2.1 models."""
