#!/bin/bash
# The H200 run of the engine frame and upload cases (issue 15), on the device machine:
#   bash tools/bench/h200_engine.sh CARRY OUT [bench args...]
# CARRY holds the Vulkan loader debs (*.deb) and the wheels wgpu needs (*.whl); OUT receives
# the JSON, the log and the adapter/driver facts. Run from a checkout of this branch (the
# setup is tools/bench/h200_kernels.sh's).
set -u
carry=$1 out=$2
shift 2
for f in "$carry"/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$carry"/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site XDG_RUNTIME_DIR=/tmp/xdg PYTHONUNBUFFERED=1
mkdir -p -m 700 /tmp/xdg
probe='import wgpu, sys; a = wgpu.gpu.request_adapter_sync(power_preference="high-performance"); print(dict(a.info)); sys.exit(0 if "NVIDIA" in str(dict(a.info)) else 1)'
if ! python3 -c "$probe"; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    python3 -c "$probe" || exit 2
fi
{
    date -u '+date: %Y-%m-%d %H:%M:%S UTC'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/nvidia-smi: /'
    python3 -c 'import wgpu, sys; print("python", sys.version.split()[0], "wgpu", wgpu.__version__)'
    cat COMMIT 2>/dev/null | sed 's/^/commit: /'
} | tee "$out/h200_engine_env.txt"
python3 -m engine_plugin bench frame uploads --json "$out/h200_engine.json" "$@" 2>&1 | tee "$out/h200_engine.log"
python3 tools/bench/profile_engine_frame.py --frames 300 --out "$out/h200_engine_profile.txt" 2>&1 | tail -3
