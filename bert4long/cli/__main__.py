"""``python -m bert4long.cli``: the same as the ``bert4long`` command."""
import sys

from bert4long.cli import main

sys.exit(main())
