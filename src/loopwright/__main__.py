"""`python -m loopwright`: the `loopwright` command."""

import sys

from loopwright.interfaces.cli import main

sys.exit(main())
