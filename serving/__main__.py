"""`python -m serving ...` is `baton serve ...`."""

import sys

from serving.cli import main

sys.exit(main(sys.argv[1:]))
