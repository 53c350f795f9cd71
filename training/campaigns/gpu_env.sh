# Source on the GPU machine before a campaign: `. training/campaigns/gpu_env.sh`
# - onnxruntime-gpu from /tmp/site (gpu_setup.sh install) ahead of the image's CPU build;
# - this checkout on PYTHONPATH (perfseer_rt, training);
# - the CUDA 13 / cuDNN 9 libraries of the image's NVIDIA pip packages on the loader
#   path, so onnxruntime's CUDA provider finds them without importing torch.
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
_nv_libs=$(python3 - <<'PY' 2>/dev/null
import os
try:
    import nvidia
except ImportError:
    raise SystemExit
dirs = []
for base in nvidia.__path__:
    for name in sorted(os.listdir(base)):
        lib = os.path.join(base, name, "lib")
        if os.path.isdir(lib):
            dirs.append(lib)
print(":".join(dirs))
PY
)
[ -n "$_nv_libs" ] && export LD_LIBRARY_PATH="$_nv_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset _nv_libs
[ -d /tmp/site/onnxruntime ] || echo "gpu_env: /tmp/site has no onnxruntime-gpu: run gpu_setup.sh install first" >&2
