"""`python -m baton ...` is the `baton` command."""

import sys

from baton.pipeline.cli import main

sys.exit(main())
