"""Timing for the course: warm-up, repeats, medians; CUDA events on a GPU, perf_counter on a CPU.

Speed is measured here and in notebook cells, never asserted by tests.

The command ``python -m quantgemm_kernels.bench`` times every registered kernel (``KERNELS``) on
llama.cpp's test-backend-ops shapes and writes a table, a CSV and a JSON file; ``--help`` lists
the options. Notebooks call :func:`run_sweep` and :func:`load_results` directly, and
:func:`measure_ceilings` for the roofline's two lines (memory bandwidth, peak matmul rate).

One module per job, every name below importable from here:

* :mod:`.machine`: what produced a number (GPU or CPU, threads, physical cores, host load, commit).
* :mod:`.timing`: the one timing mechanism, :func:`time_callable` and :func:`time_samples`.
* :mod:`.selection`: what a sweep times: entries with their side (ours or llama.cpp), baselines, shapes.
* :mod:`.sweep`: :func:`run_sweep` and :func:`bench_kernel`, timing the compiled operator.
* :mod:`.results`: the row type, the header, the one writer and reader of result files, tables.
* :mod:`.ceilings`: :func:`measure_ceilings`, the roofline's two roofs.
* :mod:`.cli`: the command line.
"""

from .ceilings import measure_ceilings
from .cli import main
from .machine import (
    BUSY_LOAD_PER_CPU,
    ROOT,
    _cores_in_cpuinfo as _cores_in_cpuinfo,
    cpu_model,
    cpu_name,
    git_commit,
    host_load,
    machine_name,
    machine_slug,
    physical_cores,
)
from .results import (
    COLUMNS,
    Row,
    cold_warm_table,
    format_table,
    load_results,
    make_header,
    read_json,
    write_csv,
    write_json,
    write_results,
)
from .selection import SHAPE_SETS, SIDES, Entry, baseline_name, entry, ggml_entries, parse_shapes, select_kernels
from .sweep import bench_kernel, bytes_moved, operator_call, run_sweep
from .timing import Timing, time_callable, time_samples

# the earlier private names, used by notebooks and tests
_cpu_model = cpu_model
_git_commit = git_commit

__all__ = [
    "BUSY_LOAD_PER_CPU",
    "COLUMNS",
    "Entry",
    "ROOT",
    "Row",
    "SHAPE_SETS",
    "SIDES",
    "Timing",
    "baseline_name",
    "bench_kernel",
    "bytes_moved",
    "cold_warm_table",
    "cpu_model",
    "cpu_name",
    "entry",
    "format_table",
    "ggml_entries",
    "git_commit",
    "host_load",
    "load_results",
    "machine_name",
    "machine_slug",
    "main",
    "make_header",
    "measure_ceilings",
    "operator_call",
    "parse_shapes",
    "physical_cores",
    "read_json",
    "run_sweep",
    "select_kernels",
    "time_callable",
    "time_samples",
    "write_csv",
    "write_json",
    "write_results",
]
