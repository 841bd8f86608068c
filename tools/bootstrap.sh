#!/usr/bin/env bash
# Bring a fresh Debian machine to a working engine_plugin checkout:
# system packages (Vulkan loader + lavapipe, Xvfb), a .venv, the package in editable mode with all extras.
# Idempotent: a stamp keyed on pyproject.toml skips the pip step when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES="libvulkan1 mesa-vulkan-drivers xvfb imagemagick x11-utils redis-server"
missing=()
for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "bootstrap: installing system packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "bootstrap: missing system packages. Run as root:" >&2
        echo "    sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
stamp_key=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat .bootstrap-stamp 2>/dev/null)" != "$stamp_key" ]; then
    echo "bootstrap: installing engine_plugin (editable) with every extra (cli, demo, dask, remote) and dev"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[all,dev]"
    echo "$stamp_key" > .bootstrap-stamp
fi
echo "bootstrap: ready ($(.venv/bin/python -c 'import wgpu; print("wgpu", wgpu.__version__)'))"
