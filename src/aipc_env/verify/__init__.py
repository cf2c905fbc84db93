"""`aipc-env verify`: prove NF4, the 8-bit optimizer and LoRA round-trips work on this device.

worker.py runs inside the training env (it imports torch); report.py holds the result models and the
table; the command in commands/verify.py starts the worker and records the result for the doctor.
"""
