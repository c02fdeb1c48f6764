"""``python -m dftracer``: the dftracer command line."""

import sys

from dftracer.tools.cli import main

sys.exit(main())
