"""One module per subcommand: `add_parser(subparsers)` declares it, `run(args) -> exit code` adapts it."""

COMMANDS = ("doctor", "resolve", "matrix", "env", "lock", "patch-requirements", "recommend", "train", "verify", "dataset", "compare", "monitor", "quantize")
