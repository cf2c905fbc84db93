"""Locking and building the training env: inputs (specs.py), uv and conda commands, lockfile checks, drift."""
