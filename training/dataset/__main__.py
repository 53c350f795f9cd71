import sys

from training.dataset.build import main

sys.exit(main())
