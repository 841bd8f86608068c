#!/bin/bash
# A/B of two checkouts on one device machine (ratios only compare within one machine):
#   bash tools/bench/h200_ab.sh CARRY OLD OUT [cases...]
# CARRY: the Vulkan loader debs and wgpu wheels (as for h200.sh); OLD: a folder holding the
# parent's `engine_plugin` (`git archive REV engine_plugin | tar -x -C OLD`); OUT: where the
# JSON goes ({old,new}_{1,2}.json). The two sides alternate, twice each.
set -u
carry=$1 old=$2 out=$3
shift 3
cases=${*:-run_host batch100 oneshot uploads frame}
for f in "$carry"/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$carry"/*.whl || exit 1
export XDG_RUNTIME_DIR=/tmp/xdg PYTHONUNBUFFERED=1
mkdir -p -m 700 /tmp/xdg
probe='import wgpu, sys; a = wgpu.gpu.request_adapter_sync(power_preference="high-performance"); sys.exit(0 if "NVIDIA" in str(dict(a.info)) else 1)'
PYTHONPATH=/tmp/site python3 -c "$probe" || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
for round in 1 2; do
    for side in old new; do
        root=$PWD
        [ "$side" = old ] && root=$(cd "$old" && pwd)
        # shellcheck disable=SC2086  # the case names split on purpose
        (cd /tmp && PYTHONPATH=$root:/tmp/site python3 -m engine_plugin bench $cases --runs 5 --json "$out/${side}_${round}.json" > "$out/${side}_${round}.log" 2>&1)
        echo "$side $round rc=$?"
    done
done
