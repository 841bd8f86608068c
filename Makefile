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

## The main job. Until the demo lands (issue 9): bake every sample variant into cache/, run the
## sample kernels against numpy, and print the benchmark table.
run: setup
	$(BIN)/engine-plugin bake assets --cache cache --json cache/bake-report.json
	$(BIN)/python tools/run_samples.py assets
	$(BIN)/python tools/bench/run.py --quick

## The whole test suite, on the real (software) GPU.
test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/engine-plugin bench

clean:
	rm -rf cache/*.msgpack .pytest_cache .hypothesis
