"""``python -m p2pfl``."""

import sys

from p2pfl.cli import main

sys.exit(main())
