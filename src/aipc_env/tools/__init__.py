"""The runbook's other tools, run in the training env: one-time NF4 quantization, base-vs-LoRA comparison, and the
memory monitor."""
