from tokmon.cli import main

raise SystemExit(main())
