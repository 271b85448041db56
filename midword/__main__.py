"""Allow ``python -m midword``."""

from midword.cli import main

raise SystemExit(main())
