"""Suite-wide set-up."""

import importlib.util

if importlib.util.find_spec("torch") is not None and importlib.util.find_spec("torchvision"):
    # torchvision's PyPI wheel is a CUDA build that cannot import under the CPU
    # torch unless its operator schemas are declared first (see the module);
    # transformers imports torchvision whenever it is installed
    from training.zoo.real.torchvision_compat import importable_torchvision

    importable_torchvision()
