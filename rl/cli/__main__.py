"""``python -m rl.cli ...`` runs the ``rl`` command."""

import sys

from rl.cli.main import main

sys.exit(main())
