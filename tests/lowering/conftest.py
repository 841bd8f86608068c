"""Report how many lowered variants the run validated on the device (a figure the issue asks for)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from lowering_support import VALIDATED

    if VALIDATED:
        per_asset = ", ".join(f"{k} {v}" for k, v in sorted(VALIDATED.items()))
        terminalreporter.write_line(
            f"lowering: {sum(VALIDATED.values())} lowered variants compiled and validated on the device ({per_asset})"
        )
