from gambit.cli import main

raise SystemExit(main())
