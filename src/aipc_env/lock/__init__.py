"""Locking (admin, connected machine): the inputs derived from the matrix (specs), the command lines of uv and the
conda tools (tools), the lockfile formats and `lock check` (lockfile), and `nox -s lock` itself (lock)."""
