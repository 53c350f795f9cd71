"""The memory layouts a GPU prediction takes (``--layout``): the one source
of truth, light enough for the option parsers to import without the GPU
predictor."""

#: ``nchw`` (PyTorch's default) or ``nhwc`` (channels-last).
LAYOUTS = ("nchw", "nhwc")
