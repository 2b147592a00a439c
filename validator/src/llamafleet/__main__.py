from llamafleet.cli import main

raise SystemExit(main())
