"""`python -m trainstack`: the same entry point as the `trainstack` command."""

import sys

from .cli import main

sys.exit(main())
