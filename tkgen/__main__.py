"""`python -m tkgen`: the command line, as the `tkgen` script (useful from a checkout that is not installed)."""
import sys

from .tools.cli import main

sys.exit(main())
