"""GPU measurement campaigns (issues 6 and 7); see README.md in this folder."""
