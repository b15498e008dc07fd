"""``python -m streamwatch``: the ``streamwatch`` command."""

from streamwatch.cli import main

raise SystemExit(main())
