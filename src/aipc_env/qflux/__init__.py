"""The qflux path on the real upstream (tsiendragon/qwen-image-finetune): the runbook's step-5 adaptation of a
clone (patches: the edits, anchored on upstream content; adapt: apply/revert with backups; checker: the
runbook's ERROR/WARN scan), running the clone's own config loader, and the smoke run. Torch-free: everything
that needs the clone's stack runs in the qflux env as a subprocess."""
