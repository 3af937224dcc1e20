"""`python -m baton.serving ...` is `baton serve ...`."""

import sys

from baton.serving.cli import main

sys.exit(main(sys.argv[1:]))
