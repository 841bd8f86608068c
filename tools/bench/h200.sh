#!/bin/bash
# The H200 runs of issue 15's benchmarks, on the device machine (see the device README):
#   bash tools/bench/h200.sh kernels|host|engine CARRY OUT [bench args...]
# CARRY holds the Vulkan loader debs (*.deb) and the wheels wgpu needs (*.whl), and a
# `git archive` of the checkout to measure when it is not the one the device tool ships;
# OUT receives the JSON, the log and the adapter/driver facts (h200_<name>*.{json,log,txt}).
set -u
name=$1 carry=$2 out=$3
shift 3
case "$name" in
    kernels) cases="kernels" ;;
    host) cases="run_host batch100 batch_bandwidth oneshot" ;;
    engine) cases="frame uploads" ;;
    *) echo "h200.sh: kernels, host or engine, not $name" >&2; exit 2 ;;
esac
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
    nproc | sed 's/^/cpus: /'
    python3 -c 'import wgpu, sys; print("python", sys.version.split()[0], "wgpu", wgpu.__version__)'
    cat COMMIT 2>/dev/null | sed 's/^/commit: /'
} | tee "$out/h200_${name}_env.txt"
# shellcheck disable=SC2086  # the case names split on purpose
python3 -m engine_plugin bench $cases --json "$out/h200_${name}.json" "$@" 2>&1 | tee "$out/h200_${name}.log"
if [ "$name" = engine ]; then
    python3 tools/bench/profile_engine_frame.py --frames 300 --out "$out/h200_engine_profile.txt" 2>&1 | tail -3
fi
