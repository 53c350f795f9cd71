import sys

from training.byod.cli import main

sys.exit(main())
