"""Training-side code of perfseer-rt (may use torch): model zoo, profiling, datasets, SeerNet.

Nothing in :mod:`perfseer_rt` imports this package.
"""
