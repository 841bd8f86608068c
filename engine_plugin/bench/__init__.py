"""Benchmarks: each case runs the plugin path and a hand-written raw wgpu-py equivalent in the
same process and run, and reports medians and their ratio (plugin / raw; lower is better for
times, higher for bandwidth). ``engine-plugin bench`` and ``tools/bench/run.py`` call :func:`main`."""

from __future__ import annotations

from .harness import CASES, Result, main, run_cases

__all__ = ["CASES", "Result", "main", "run_cases"]
