"""Lets ``python -m scheduler`` behave exactly like the ``gang-scheduler`` console script."""

from scheduler.cli import main

raise SystemExit(main())
