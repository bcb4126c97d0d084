"""`python -m tui` runs det-tui."""

import sys

from tui.app import main

sys.exit(main())
