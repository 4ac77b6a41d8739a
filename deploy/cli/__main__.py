"""`python -m deploy.cli ...`: the `causeway` command (launchers and tests start children so)."""

import sys

from deploy.cli import main

sys.exit(main())
