import sys

from crossfeed.proxy.cli.main import main

sys.exit(main())
