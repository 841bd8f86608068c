# The two commands a newcomer runs (README): `make run` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export XDG_RUNTIME_DIR ?= /tmp/engine-plugin-xdg-$(shell id -u)
export MESA_SHADER_CACHE_DIR ?= $(CURDIR)/cache/.mesa
export PYTHONUNBUFFERED := 1

.PHONY: setup run test lint bench clean

setup:
	@mkdir -p $(XDG_RUNTIME_DIR) && chmod 700 $(XDG_RUNTIME_DIR)
	@bash tools/bootstrap.sh

## The main job: bake every variant of every asset into cache/ (validated on the GPU), then run
## the demo world: a window when DISPLAY is set (Esc quits), else 300 headless frames + a PNG.
run: setup
	$(BIN)/engine-plugin bake assets --builtin --cache cache --json cache/bake-report.json
	$(BIN)/engine-plugin demo --frames 300 --cache cache --snapshot out/demo.png

## The quality gates, then the whole test suite on the real (software) GPU.
test: setup lint
	$(BIN)/python -m pytest -q

## ruff (lint + format check) and mypy over the package; configuration in pyproject.toml.
lint: setup
	$(BIN)/ruff check engine_plugin
	$(BIN)/ruff format --check engine_plugin
	$(BIN)/mypy

bench: setup
	$(BIN)/engine-plugin bench

clean:
	rm -rf cache/*.msgpack .pytest_cache .hypothesis
