"""Which onnxruntime is installed: exactly one of the CPU and GPU builds.

``onnxruntime`` and ``onnxruntime-gpu`` install the same ``onnxruntime``
module; with both present the files of the last one installed win and the
other's metadata lies. ``perfseer-rt`` depends on the first and
``perfseer-rt-gpu`` on the second (docs/install.md), so both only
appear when the two were mixed in one environment.
"""

from __future__ import annotations

from importlib import metadata

from perfseer_rt.errors import PerfSeerError

FLAVOURS = ("onnxruntime", "onnxruntime-gpu")


def installed_flavours() -> list[str]:
    """The onnxruntime distributions installed here."""
    found = []
    for name in FLAVOURS:
        try:
            metadata.version(name)
            found.append(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def check_onnxruntime() -> str:
    """The one installed flavour; PerfSeerError naming the fix otherwise."""
    found = installed_flavours()
    if len(found) == 1:
        return found[0]
    if not found:
        raise PerfSeerError("onnxruntime is not installed: pip install perfseer-rt (CPU) "
                            "or perfseer-rt-gpu (CUDA)")
    raise PerfSeerError("both onnxruntime and onnxruntime-gpu are installed and overwrite "
                        "each other: pip uninstall -y onnxruntime onnxruntime-gpu, then "
                        "pip install perfseer-rt (CPU) or perfseer-rt-gpu (CUDA)")
