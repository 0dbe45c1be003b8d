"""``python -m crossfeed ...``: the same command line as ``crossfeed ...``."""

import sys

from crossfeed.proxy.cli.main import main

sys.exit(main())
