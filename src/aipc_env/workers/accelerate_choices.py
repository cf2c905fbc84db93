"""The values accelerate's own enums allow (DistributedType, PrecisionType, DynamoBackend), read where accelerate
is installed: the training env. `aipc-env adapt` checks the clone's accelerate config against them
(qflux/checker.py) without importing accelerate itself."""

from __future__ import annotations

import sys

from aipc_env.qflux.checker import AccelerateChoices

__all__ = ["accelerate_choices", "main"]


def accelerate_choices() -> AccelerateChoices:
    """accelerate's enum values, or none (version None) where accelerate does not import."""
    try:
        import accelerate
        from accelerate.utils import DistributedType, DynamoBackend, PrecisionType
    except ImportError:
        return AccelerateChoices(version=None, distributed_type=[], mixed_precision=[], dynamo_backend=[])
    return AccelerateChoices(
        version=accelerate.__version__,
        distributed_type=[e.value for e in DistributedType],
        mixed_precision=[e.value for e in PrecisionType],
        dynamo_backend=[e.value for e in DynamoBackend],
    )


def main(argv: list[str] | None = None) -> int:
    from aipc_env.core.formats import write_model
    from aipc_env.errors import ExitCode
    from aipc_env.launch.hops import AccelerateProbe, run_worker

    args = AccelerateProbe.parse(argv)

    def body() -> int:
        write_model(args.result, accelerate_choices())
        return ExitCode.OK

    return run_worker("accelerate choices", body, result=args.result)


if __name__ == "__main__":
    sys.exit(main())
