"""Timing for the course (see :mod:`.sweep`); ``python -m quantgemm_kernels.bench`` is its command."""
from .sweep import *  # noqa: F401,F403
from .sweep import (_cores_in_cpuinfo, _cpu_model, _git_commit, _PROBE_FLOPS,  # noqa: F401
                    ROOT, COLUMNS, SHAPE_SETS, BUSY_LOAD_PER_CPU, Timing)
