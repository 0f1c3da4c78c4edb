from mmgrid.cli import main

raise SystemExit(main())
