"""``python -m perfseer_rt.cli``: the same as the ``perfseer-rt`` script."""

import sys

from perfseer_rt.cli import main

if __name__ == "__main__":
    sys.exit(main())
