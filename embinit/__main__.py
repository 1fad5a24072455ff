"""`python -m embinit` is the `embinit` command."""

import sys

from embinit.cli import main

sys.exit(main())
