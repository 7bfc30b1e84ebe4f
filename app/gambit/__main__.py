from gambit.cli.main import main

raise SystemExit(main())
