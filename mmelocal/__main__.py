"""``python -m mmelocal`` runs the CLI."""

import sys

from mmelocal.cli.main import main

sys.exit(main())
