"""`aipc-env distill`: the recipe of the image21-turbo-trajectories project — a LoRA that makes Qwen-Image-2.1(-Turbo)
at 4 steps match its own 8-step output from the same noise — as gated stages: G0 plumbing, trajectories, student
training, G2 sampler parity, G3 quality, report. Its recorded root causes are named checks (lessons.py).

config.py and verdict.py are torch-free (the CLI reads them); everything else runs in the training env through
the stage worker (`python -m aipc_env.workers.distill.worker`).
"""
