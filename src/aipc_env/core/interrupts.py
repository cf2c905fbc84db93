"""Named critical instants, for proving that an interrupt at any of them leaves a state the next run recovers.

`checkpoint("adapt:after-replace")` does nothing, unless AIPC_ENV_INTERRUPT_AT names that instant: then the process
sends itself SIGINT right there (a real signal, so the same KeyboardInterrupt path as a user's Ctrl-C runs), or
SIGKILL with AIPC_ENV_INTERRUPT_SIGNAL=KILL (a power cut: no handler runs). Tests set the variables; users never need
to. Standard library only.
"""

from __future__ import annotations

import os
import signal

__all__ = ["ENV_VAR", "checkpoint"]

ENV_VAR = "AIPC_ENV_INTERRUPT_AT"


def checkpoint(name: str) -> None:
    wanted = os.environ.get(ENV_VAR)
    if wanted and wanted == name:
        os.environ.pop(ENV_VAR, None)  # once: the recovery run in the same process must not stop again
        hard = os.environ.get("AIPC_ENV_INTERRUPT_SIGNAL", "").upper() == "KILL"
        if not hard:  # a Ctrl+C even where the process was started with SIGINT ignored (a background job)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM) if hard else signal.SIGINT)
