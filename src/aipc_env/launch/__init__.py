"""Launch scripts: plan.py decides (pure), scripts.py renders .bat/.sh, runner.py runs phases inside the env.

Keep this package's __init__ free of imports: runner.py runs in the training env with the standard library only.
"""
