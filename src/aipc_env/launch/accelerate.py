"""The accelerate config every run's launcher passes to `accelerate launch` (the training engine's, distillation's
and the qflux smoke run's), written in one place."""

from __future__ import annotations

__all__ = ["accelerate_config_text"]


def accelerate_config_text(device: str, processes: int = 1, port: int | None = None) -> str:
    """No accelerate-side mixed precision (the engines autocast themselves), no dynamo. One process: no distributed
    backend. More than one: torchrun's launcher (accelerate's MULTI_GPU type starts it; on the CPU the worker's
    Accelerator(cpu=True) then joins a gloo group), MULTI_XPU on XPUs. 'no' and 'NO' are quoted: unquoted YAML
    turns them into booleans."""
    if processes == 1:
        head, kind = "# written by aipc-env: single device, no distributed backend\n", "'NO'"
    else:
        head = f"# written by aipc-env: {int(processes)} processes\n"
        kind = "MULTI_XPU" if device.startswith("xpu") else "MULTI_GPU"
    return (
        head + "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        f"distributed_type: {kind}\n"
        "mixed_precision: 'no'\n"
        "dynamo_backend: 'no'\n"
        "num_machines: 1\n"
        f"num_processes: {int(processes)}\n"
        "machine_rank: 0\n" + (f"main_process_port: {int(port)}\n" if port is not None else "") + "main_training_function: main\n"
        f"use_cpu: {'true' if device == 'cpu' and processes == 1 else 'false'}\n"
    )
