"""Launching runs: plan.py decides what a run does (pure), render.py writes it from the templates in launchers/,
execute.py starts the launcher, runner.py runs the phases inside the training env.

Keep this package's __init__ free of imports: runner.py runs in the training env with the standard library only.
"""
