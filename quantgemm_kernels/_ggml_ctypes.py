"""ggml's C API through ``ctypes``, for a standalone ggml build (``tools/build_ggml.sh``).

``load(libdir)`` opens the shared libraries of such a build and returns a module-like object
with the names :mod:`quantgemm_kernels.llamacpp` calls on the ``ggml`` module (the same names
as ggml's C functions and enums), so that the rest of ``llamacpp`` does not care which one it has.
Only those functions are bound, with the signatures of ggml 0.25's headers (``include/ggml.h``,
``ggml-alloc.h``, ``ggml-backend.h``, ``ggml-cpu.h``, ``ggml-cuda.h``); ``llamacpp`` reaches the type
traits through the libraries itself (``_c_function``), as it does for the packages.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import types
from ctypes import POINTER, c_bool, c_char_p, c_float, c_int, c_int64, c_size_t, c_void_p
from pathlib import Path

PACKAGE = "ggml (standalone build, ctypes)"

#: enum ggml_type (ggml.h), the values llamacpp uses
TYPES = {
    "GGML_TYPE_F32": 0,
    "GGML_TYPE_F16": 1,
    "GGML_TYPE_Q4_0": 2,
    "GGML_TYPE_Q4_1": 3,
    "GGML_TYPE_Q8_0": 8,
    "GGML_TYPE_Q8_1": 9,
    "GGML_TYPE_Q4_K": 12,
    "GGML_TYPE_Q6_K": 14,
    "GGML_TYPE_Q8_K": 15,
}


class ggml_init_params(ctypes.Structure):  # noqa: N801 - ggml's name; ggml_init takes it by value
    _fields_ = [("mem_size", c_size_t), ("mem_buffer", c_void_p), ("no_alloc", c_bool)]


_P = c_void_p  # every ggml pointer (context, tensor, graph, backend, buffer) stays opaque here

#: name -> (restype, argtypes); the library does not matter once all are loaded RTLD_GLOBAL
_FUNCTIONS = {
    # ggml.h
    "ggml_version": (c_char_p, []),
    "ggml_commit": (c_char_p, []),
    "ggml_tensor_overhead": (c_size_t, []),
    "ggml_graph_overhead_custom": (c_size_t, [c_size_t, c_bool]),
    "ggml_init": (_P, [ggml_init_params]),
    "ggml_free": (None, [_P]),
    "ggml_new_tensor_2d": (_P, [_P, c_int, c_int64, c_int64]),
    "ggml_mul_mat": (_P, [_P, _P, _P]),
    "ggml_new_graph_custom": (_P, [_P, c_size_t, c_bool]),
    "ggml_build_forward_expand": (None, [_P, _P]),
    "ggml_graph_add_node": (None, [_P, _P]),
    "ggml_graph_n_nodes": (c_int, [_P]),
    "ggml_nbytes": (c_size_t, [_P]),
    "ggml_row_size": (c_size_t, [c_int, c_int64]),
    "ggml_type_name": (c_char_p, [c_int]),
    "ggml_blck_size": (c_int64, [c_int]),
    "ggml_type_size": (c_size_t, [c_int]),
    "ggml_is_quantized": (c_bool, [c_int]),
    "ggml_quantize_chunk": (c_size_t, [c_int, POINTER(c_float), c_void_p, c_int64, c_int64, c_int64, POINTER(c_float)]),
    # ggml-alloc.h, ggml-backend.h
    "ggml_backend_alloc_ctx_tensors": (_P, [_P, _P]),
    "ggml_backend_buffer_free": (None, [_P]),
    "ggml_backend_free": (None, [_P]),
    "ggml_backend_synchronize": (None, [_P]),
    "ggml_backend_tensor_set": (None, [_P, c_void_p, c_size_t, c_size_t]),
    "ggml_backend_tensor_get": (None, [_P, c_void_p, c_size_t, c_size_t]),
    "ggml_backend_graph_compute": (c_int, [_P, _P]),  # enum ggml_status, 0 = success
    # ggml-cpu.h
    "ggml_cpu_init": (None, []),
    "ggml_backend_cpu_init": (_P, []),
    "ggml_backend_cpu_set_n_threads": (None, [_P, c_int]),
    "ggml_cpu_has_avx2": (c_int, []),
    "ggml_cpu_has_avx_vnni": (c_int, []),
    "ggml_cpu_has_avx512_vnni": (c_int, []),
    "ggml_cpu_has_llamafile": (c_int, []),
}
_CUDA_FUNCTIONS = {  # ggml-cuda.h, bound only where libggml-cuda is there
    "ggml_backend_cuda_init": (_P, [c_int]),
    "ggml_backend_cuda_get_device_count": (c_int, []),
    "ggml_backend_cuda_get_device_description": (None, [c_int, c_char_p, c_size_t]),
}

_LOADED: dict[Path, types.ModuleType] = {}


def _lib_path(libdir: Path, name: str) -> Path | None:
    for suffix in (".so", ".dylib"):
        if (libdir / f"{name}{suffix}").exists():
            return libdir / f"{name}{suffix}"
    return None


def load(libdir) -> types.ModuleType:
    """The libraries of a standalone ggml build in ``libdir`` (PREFIX/lib of ``tools/build_ggml.sh``)
    as a module-like object. Raises ``OSError`` when they are not there or do not load."""
    libdir = Path(libdir).expanduser().resolve()
    if libdir in _LOADED:
        return _LOADED[libdir]
    if _lib_path(libdir, "libggml-base") is None or _lib_path(libdir, "libggml") is None:
        raise OSError(f"{libdir} holds no libggml-base / libggml shared library (build one with tools/build_ggml.sh)")
    # libggml-base first: the others need its symbols; libggml (the backend registry) last. Not
    # RTLD_GLOBAL, and with RTLD_DEEPBIND where there is one: a ggml Python package in the same
    # process loads its own libggml-base etc. RTLD_GLOBAL, and the two ggml versions must not bind
    # each other's symbols (they share the names, not the structs). Each library finds the others
    # by their sonames (already loaded) or through its RUNPATH $ORIGIN.
    mode = ctypes.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0)
    names = ["libggml-base", "libggml-cpu", "libggml-cuda", "libggml"]
    libs = [ctypes.CDLL(str(p), mode=mode) for p in (_lib_path(libdir, n) for n in names) if p]
    has_cuda = _lib_path(libdir, "libggml-cuda") is not None

    m = types.ModuleType("ggml_ctypes", __doc__)
    m.__file__ = str(_lib_path(libdir, "libggml-base"))  # unique per build: llamacpp's cache key
    m.LIB_DIR = libdir
    m.PACKAGE = PACKAGE
    m.GGML_USE_CUDA = has_cuda
    m._ggml_libs = libs
    m.ggml_init_params = ggml_init_params
    for name, value in TYPES.items():
        setattr(m, name, value)
    for name, (restype, argtypes) in {**_FUNCTIONS, **(_CUDA_FUNCTIONS if has_cuda else {})}.items():
        fn = None
        for lib in libs:
            try:
                fn = lib[name]  # a fresh function object per lookup: our argtypes stay ours
                break
            except AttributeError:
                continue
        if fn is None:
            raise OSError(f"{libdir}: no library exports {name}")
        fn.restype, fn.argtypes = restype, argtypes
        setattr(m, name, fn)
    m.__version__ = m.ggml_version().decode()
    m.BUILD_INFO = None  # PREFIX/ggml-build.json, written by tools/build_ggml.sh
    for path in (libdir / "ggml-build.json", libdir.parent / "ggml-build.json"):
        if path.is_file():
            m.BUILD_INFO = json.loads(path.read_text())
            break
    _LOADED[libdir] = m
    return m


if __name__ == "__main__":  # python -m quantgemm_kernels._ggml_ctypes PREFIX/lib
    g = load(sys.argv[1])
    print(g.PACKAGE, g.__version__, g.ggml_commit().decode(), "CUDA" if g.GGML_USE_CUDA else "CPU only")
