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

## Bake the sample assets, then run the demo world (window when DISPLAY is set, else headless).
run: setup
	$(BIN)/engine-plugin bake assets --cache cache
	$(BIN)/engine-plugin demo --frames 300

## The whole test suite, on the real (software) GPU.
test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/engine-plugin bench

clean:
	rm -rf cache/*.msgpack .pytest_cache .hypothesis
