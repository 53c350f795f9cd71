import sys

from benchmarks.nb201.cli import main

sys.exit(main())
