import sys

from training.campaign.cli import main

sys.exit(main())
