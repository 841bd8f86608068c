"""``python -m engine_plugin``: the ``engine-plugin`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
