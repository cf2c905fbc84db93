"""The training env: which one a command uses and for which pair (select: THE policy), building and repairing it
from a lock (build), drift against the lock (drift), the per-user records (record), and edits of a qflux clone's
requirements file for it (requirements). Environment side: never imports torch."""
