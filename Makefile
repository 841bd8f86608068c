# The two commands a newcomer runs (README): `make run` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export XDG_RUNTIME_DIR ?= /tmp/engine-plugin-xdg-$(shell id -u)
export MESA_SHADER_CACHE_DIR ?= $(CURDIR)/cache/.mesa
export PYTHONUNBUFFERED := 1

.PHONY: setup run test bench clean

setup:
	@mkdir -p $(XDG_RUNTIME_DIR) && chmod 700 $(XDG_RUNTIME_DIR)
	@bash tools/bootstrap.sh

## The main job: bake every variant of every asset into cache/ (validated on the GPU), then run
## the demo world: a window when DISPLAY is set (Esc quits), else 300 headless frames + a PNG.
run: setup
	$(BIN)/engine-plugin bake assets --cache cache --json cache/bake-report.json
	$(BIN)/engine-plugin demo --frames 300 --cache cache --snapshot out/demo.png

## The whole test suite, on the real (software) GPU.
test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/engine-plugin bench

clean:
	rm -rf cache/*.msgpack .pytest_cache .hypothesis
