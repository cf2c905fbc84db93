"""Training: the config schema (config.py), the run planner (run.py) and the built-in engine (engine.py)."""
