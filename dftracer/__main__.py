"""``python -m dftracer``: the dftracer command line."""

import sys

from dftracer.cli import main

sys.exit(main())
