"""One thin adapter per subcommand: `add_parser(subparsers)` declares it, `run(args) -> exit code` converts the
arguments and calls typed functions. Shared options live in options.py; the command list in aipc_env.cli."""
