"""The GPU half of the ABI: compile, programs and variants, runs, outputs, tables."""

from .batch import batch
from .compile import CompiledVariant, compile_count, compile_lowered, compiled
from .deferred import flush
from .output import Output, read
from .program import LoweredStore, Program, lowering_count, program
from .table import Table, table
from .variant import Run, Variant

__all__ = [
    "CompiledVariant",
    "LoweredStore",
    "Output",
    "Program",
    "Run",
    "Table",
    "Variant",
    "batch",
    "compile_count",
    "compile_lowered",
    "compiled",
    "flush",
    "lowering_count",
    "program",
    "read",
    "table",
]
