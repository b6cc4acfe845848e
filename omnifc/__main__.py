"""``python -m omnifc``: the same as the ``omnifc`` command."""

import sys

from .cli import main

sys.exit(main())
