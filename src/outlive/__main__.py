"""``python -m outlive``: the same as the ``outlive`` command (dispatchers spawn workers this way)."""

from .cli import main

raise SystemExit(main())
