from recombine.cli import main

raise SystemExit(main())
