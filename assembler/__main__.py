from assembler.cli import main

raise SystemExit(main())
