"""``python -m runtime.arm --fd N``: the arm process, started by the daemon (never by hand)."""

import sys

from runtime.arm.process import main

sys.exit(main())
