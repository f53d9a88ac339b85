"""Run one compiled exercise on its test cases, in a process of its own.

Started by :mod:`quantgemm_kernels.exercises` as ``python _exercise_runner.py LIB CASES OUT [--torch]``: a
reader's code that reads out of bounds, loops forever or corrupts a CUDA context takes this process
down, not the notebook's. It imports numpy and ctypes only (no package import), so it starts in a
fraction of a second; with ``--torch`` (the CUDA exercises) it imports torch first, so that the
library finds the CUDA runtime torch loads, as the package's own CUDA extension finds it.

``CASES`` is an ``.npz`` with ``cases`` (their number) and, for case k, ``c{k}_dims`` (int64),
``c{k}_in{i}`` and ``c{k}_out{i}`` (the outputs, pre-filled by the caller). Before each case the
runner writes ``case k`` to stderr, so that the caller knows which case a crash happened in.
Writes ``OUT`` (``.npz``, the outputs of every case) and exits 0; on an error that the library
reports, writes the message to stderr and exits 3.
"""

import ctypes
import sys

import numpy as np


def _unbuffered_c_stdout() -> None:
    """The reader's printf output reaches the caller even if the code then crashes or hangs."""
    try:
        libc = ctypes.CDLL(None)
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 2, 0)  # 2: _IONBF (glibc)
    except (AttributeError, OSError, ValueError):
        pass  # not glibc: the output still arrives when the process ends normally


def main(lib_path: str, cases_path: str, out_path: str, with_torch: bool = False) -> int:
    _unbuffered_c_stdout()
    if with_torch:
        import torch  # noqa: F401  (loads the CUDA runtime and libraries the build linked against)

    lib = ctypes.CDLL(lib_path)
    run = lib.qgex_run
    run.restype = ctypes.c_int
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    data = np.load(cases_path)
    results = {}
    for k in range(int(data["cases"])):
        ins = [np.ascontiguousarray(data[f"c{k}_in{i}"]) for i in range(_count(data, f"c{k}_in"))]
        outs = [np.ascontiguousarray(data[f"c{k}_out{i}"]).copy() for i in range(_count(data, f"c{k}_out"))]
        dims = np.ascontiguousarray(data[f"c{k}_dims"], dtype=np.int64)
        in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[a.ctypes.data for a in ins])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[a.ctypes.data for a in outs])
        err = ctypes.create_string_buffer(1024)
        print(f"case {k}", file=sys.stderr, flush=True)
        rc = run(in_ptrs, out_ptrs, dims.ctypes.data, err, len(err))
        if rc != 0:
            print(f"error in case {k}: {err.value.decode(errors='replace')}", file=sys.stderr, flush=True)
            return 3
        for i, a in enumerate(outs):
            results[f"c{k}_out{i}"] = a
    np.savez(out_path, **results)
    return 0


def _count(data, prefix: str) -> int:
    n = 0
    while f"{prefix}{n}" in data.files:
        n += 1
    return n


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4], with_torch="--torch" in sys.argv[4:]))
