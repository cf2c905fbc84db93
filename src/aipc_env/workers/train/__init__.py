"""The training engine's torch side: its phases (cache, fit, held-out samples), the objective, the sampler, the tiny
models and pipelines the tests and the built-in default train."""
