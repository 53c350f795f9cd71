"""``perfseer-rt calibrate``: a predictor of this machine, corrected from a
minute of profiling bundled reference models (:mod:`perfseer_rt.calibrate.api`)."""
