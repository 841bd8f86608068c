#!/bin/bash
# The test suite's GPU directories on the H200's NVIDIA Vulkan driver, through the device tool:
#   bash tools/h200_tests.sh CARRY EXTRA OUT [pytest args...]
# CARRY: the Vulkan loader debs (libvulkan1 and the glvnd ones the NVIDIA driver loads: libglvnd0
# libegl1 libgl1 libglx0 libgles2 libopengl0; without them no adapter is found) and the wgpu wheels
# (wgpu, cffi, pycparser, rendercanvas, sniffio; as for tools/bench/h200.sh); EXTRA: pure-Python
# packages the machine lacks (`mkdir -p build/h200py && cp -r .venv/lib/python3.11/site-packages/watchdog
# build/h200py/`); OUT: where pytest.log goes. The machine has pytest, hypothesis and pytest-xdist.
# Without test arguments: every directory but those needing a display, the network or a wheel build,
# under xdist. lavapipe hides what a real GPU shows: fused multiply-adds, NaN bits, a poll thread
# that holds the device while the GPU works (this found all three).
set -u
carry=$1 extra=$2 out=$3
shift 3
for f in "$carry"/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$carry"/*.whl || exit 1
export XDG_RUNTIME_DIR=/tmp/xdg PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site:$PWD/$extra
mkdir -p -m 700 /tmp/xdg
probe='import wgpu, sys; a = wgpu.gpu.request_adapter_sync(power_preference="high-performance"); sys.exit(0 if "NVIDIA" in str(dict(a.info)) else 1)'
python3 -c "$probe" || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
python3 -c "from engine_plugin.device.context import get_context; print(get_context().adapter_name)"
if [ $# -eq 0 ]; then
    set -- -n 15 tests --ignore=tests/demo --ignore=tests/packaging --ignore=tests/bake --ignore=tests/remote --ignore=tests/bench
fi
timeout 520 python3 -m pytest -v -p no:cacheprovider -p no:randomly --timeout 120 --tb=short "$@" > "$out/pytest.log" 2>&1
echo "pytest rc=$?"
grep -E "^E  |FAILED|ERROR|passed|failed" "$out/pytest.log" | head -60
