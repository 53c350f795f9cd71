"""Suite-wide set-up.

The suite never reads or writes the user's own perfseer-rt folders: before any
test module is imported, ``PERFSEER_RT_HOME`` and ``XDG_DATA_HOME`` point into
a temporary folder made for this run (removed at exit), so a device entry the
user calibrated (``~/.local/share/perfseer-rt/devices``) cannot change a
result. Subprocesses the tests start inherit the same environment.
"""

import atexit
import importlib.util
import os
import shutil
import tempfile

_HOME = tempfile.mkdtemp(prefix="perfseer-rt-tests-")
atexit.register(shutil.rmtree, _HOME, True)
os.environ["PERFSEER_RT_HOME"] = os.path.join(_HOME, "perfseer-rt")
os.environ["XDG_DATA_HOME"] = os.path.join(_HOME, "xdg-data")
os.environ["XDG_CACHE_HOME"] = os.path.join(_HOME, "xdg-cache")

if importlib.util.find_spec("torch") is not None and importlib.util.find_spec("torchvision"):
    # torchvision's PyPI wheel is a CUDA build that cannot import under the CPU
    # torch unless its operator schemas are declared first (see the module);
    # transformers imports torchvision whenever it is installed
    from training.zoo.real.torchvision_compat import importable_torchvision

    importable_torchvision()
