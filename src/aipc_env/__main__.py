from aipc_env.cli import main

raise SystemExit(main())
