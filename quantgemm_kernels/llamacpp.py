"""llama.cpp's own kernels from Python: ggml's ``mul_mat``, its CPU dot products and its quantizers.

Chapter 5 uses this module to put our kernels next to the code they imitate. ggml is the tensor
library inside llama.cpp; we reach its C API in one of three ways:

* a **standalone ggml build**, when the environment variable ``QUANTGEMM_GGML_LIB`` names the
  folder of its shared libraries: ``tools/build_ggml.sh SRC PREFIX [cuda]`` builds one (e.g.
  ggml 0.25.3 from the llama-cpp-python 0.3.36 sdist, the newest here) and
  :mod:`quantgemm_kernels._ggml_ctypes` binds it; CPU, and CUDA where built with it.
  Where the variable is set, it is used or its error is reported: never a silent fallback.
* otherwise the ``ggml`` Python module, which compiles ggml from source when it is installed.
  Two packages provide it and both import as ``ggml``:

  * ``ggml-python`` (0.0.45 vendors ggml 0.15.3): CPU works; its CUDA build does not import.
  * ``ggml-py`` (0.10.1 vendors ggml 0.10.1): CPU and CUDA work; it lacks a few bindings
    (the type traits, ``ggml_graph_add_node``), which we then bind ourselves from its libraries.

Pick one per environment. Nothing here loads ggml at package import: each function loads it
when called, and :func:`available` says what works before anything is tried.

The GEMM convention is the course's: weights ``W [M, K]``, activations ``A [N, K]``,
``C [N, M] = A @ W.T``. In ggml's terms (``ne0`` = the contiguous dimension):

* ``a`` = weights, ``ne0 = K, ne1 = M`` (one row of K values per output feature),
* ``b`` = activations, F32, ``ne0 = K, ne1 = N``,
* ``c = ggml_mul_mat(a, b)``, ``ne0 = M, ne1 = N``: row-major ``[N, M]``, our C.

ggml itself quantizes ``b`` to the weight type's ``vec_dot_type`` inside ``mul_mat``: on the
CPU that is **Q8_0** for Q4_0 and Q8_0 weights (not Q8_1, which the CUDA backend uses), so
ggml's CPU result differs from our W4A16 reference by the activation quantization error.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from pathlib import Path

import numpy as np

from . import formats as F

#: our format names -> ggml's type enum names
_GGML_TYPE_NAMES = {
    "f32": "GGML_TYPE_F32",
    "q4_0": "GGML_TYPE_Q4_0",
    "q4_1": "GGML_TYPE_Q4_1",
    "q8_0": "GGML_TYPE_Q8_0",
    "q8_1": "GGML_TYPE_Q8_1",
    "q4_k": "GGML_TYPE_Q4_K",
    "q6_k": "GGML_TYPE_Q6_K",
    "q8_k": "GGML_TYPE_Q8_K",
}
#: formats llama.cpp never stores in a file (activations): no ggml_quantize_chunk for them; their
#: reference quantizer is quantize_row_<type>_ref (the type traits' from_float_ref for Q8_1; Q8_K's
#: traits have none, so the function is called by its exported name)
_NOT_STORED = ("q8_1", "q8_k")
#: ggml's spelling of a type in its function names (quantize_row_q4_K_ref)
_C_NAMES = {"q4_k": "q4_K", "q6_k": "q6_K", "q8_k": "q8_K"}
WEIGHT_FORMATS = ("f32", "q4_0", "q8_0")  #: the weight formats the benchmarks compare (chapters 5-6)
#: weight formats ggml_mul_mat accepts here (Q4_1: chapter 7; the K-quants Q4_K and Q6_K: chapter 8)
MUL_MAT_FORMATS = (*WEIGHT_FORMATS, "q4_1", "q4_k", "q6_k")

# test-backend-ops perf: enough repeated nodes per graph to reach this many flops (8 GFLOP on a
# CPU backend, 100 GFLOP on a GPU one), so that the per-graph launch cost is amortised.
_TARGET_FLOPS = {"cpu": 8e9, "cuda": 100e9}
_MAX_REPEATS = 256  # test-backend-ops is bounded by its graph size; we keep graphs small too


class GgmlUnavailable(ImportError):
    """The ``ggml`` module, or the part of it a function needs, is not there."""


# ---------------------------------------------------------------------------------------------
# Finding the module and the C functions it may not bind
# ---------------------------------------------------------------------------------------------


def _ggml():
    """The ggml API: the standalone build named by ``QUANTGEMM_GGML_LIB``, else the ``ggml`` module."""
    libdir = os.environ.get("QUANTGEMM_GGML_LIB")
    if libdir:
        from . import _ggml_ctypes

        try:
            return _ggml_ctypes.load(libdir)
        except OSError as e:
            raise GgmlUnavailable(
                f"QUANTGEMM_GGML_LIB={libdir}: the ggml libraries do not load ({e}). "
                "Build them with tools/build_ggml.sh, or unset the variable"
            ) from e
    try:
        import ggml
    except Exception as e:  # an ImportError, or ggml-python's CUDA build failing at import
        raise GgmlUnavailable(
            f"the ggml module does not import ({type(e).__name__}: {e}). Install ggml-python "
            "(CPU) or ggml-py (CPU and CUDA); see book/setup.md"
        ) from e
    return ggml


def _package_name(g) -> str:
    """Which package provides ``ggml``: the two share the module name, not the API."""
    if getattr(g, "PACKAGE", None) == "ggml (standalone build, ctypes)":
        return g.PACKAGE
    if hasattr(g, "ggml_get_type_traits_cpu"):
        return "ggml-python"
    return "ggml-py" if str(getattr(g, "__version__", "")).startswith("0.1") else "unknown"


def _libraries(g) -> list[ctypes.CDLL]:
    """The shared libraries the package loaded, opened again by path.

    Opening by path returns the same loaded library; indexing ``lib[name]`` then gives a fresh
    function object, so setting its argtypes here cannot change the package's own bindings.
    """
    if hasattr(g, "_ggml_libs"):  # the standalone build: _ggml_ctypes opened them already
        return list(g._ggml_libs)
    libdir = Path(g.__file__).resolve().parent / "lib"
    paths = sorted(libdir.glob("libggml*.so")) + sorted(libdir.glob("libggml*.dylib"))
    libs = []
    for p in paths:
        try:
            libs.append(ctypes.CDLL(str(p)))
        except OSError:
            pass
    return libs


_C_CACHE: dict = {}


def _c_function(g, name: str, argtypes, restype, prefer_package: bool = True):
    """``ggml.<name>`` when the package binds it, else the symbol from its libraries, else None."""
    if prefer_package and callable(getattr(g, name, None)):
        return getattr(g, name)
    key = (g.__file__, name)
    if key not in _C_CACHE:
        fn = None
        for lib in _libraries(g):
            try:
                fn = lib[name]
            except AttributeError:
                continue
            fn.argtypes, fn.restype = argtypes, restype
            break
        _C_CACHE[key] = fn
    return _C_CACHE[key]


# ggml's C typedefs (ggml.h, ggml-cpu.h; the same in ggml 0.10 and 0.15):
#   void (*ggml_to_float_t)  (const void * x, float * y, int64_t k);
#   void (*ggml_from_float_t)(const float * x, void * y, int64_t k);
#   void (*ggml_vec_dot_t)   (int n, float * s, size_t bs, const void * x, size_t bx,
#                             const void * y, size_t by, int nrc);
_to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)
_from_float_t = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_int64)
_vec_dot_t = ctypes.CFUNCTYPE(
    None,
    ctypes.c_int,
    ctypes.POINTER(ctypes.c_float),
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
)


class _TypeTraits(ctypes.Structure):  # struct ggml_type_traits
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", _to_float_t),
        ("from_float_ref", _from_float_t),
    ]


class _TypeTraitsCpu(ctypes.Structure):  # struct ggml_type_traits_cpu
    _fields_ = [
        ("from_float", _from_float_t),
        ("vec_dot", _vec_dot_t),
        ("vec_dot_type", ctypes.c_int),
        ("nrows", ctypes.c_int64),
    ]


def _type_traits(g, t: int) -> _TypeTraits:
    # Our own struct in both packages, so the field types are the same whichever one is loaded.
    fn = _c_function(g, "ggml_get_type_traits", [ctypes.c_int], ctypes.POINTER(_TypeTraits), prefer_package=False)
    if fn is None:
        raise GgmlUnavailable("this ggml build does not export ggml_get_type_traits")
    return fn(t).contents


def _type_traits_cpu(g, t: int) -> _TypeTraitsCpu:
    fn = _c_function(
        g, "ggml_get_type_traits_cpu", [ctypes.c_int], ctypes.POINTER(_TypeTraitsCpu), prefer_package=False
    )
    if fn is None:
        raise GgmlUnavailable("this ggml build does not export ggml_get_type_traits_cpu (no CPU backend?)")
    init = _c_function(g, "ggml_cpu_init", [], None, prefer_package=False)
    if init is not None:
        init()  # fills the fp16 tables the CPU dot products use; idempotent
    return fn(t).contents


def _type(g, fmt: str) -> int:
    if fmt not in _GGML_TYPE_NAMES:
        raise ValueError(f"format must be one of {tuple(_GGML_TYPE_NAMES)}, got {fmt!r}")
    return int(getattr(g, _GGML_TYPE_NAMES[fmt]))


def _type_name(g, t: int) -> str:
    for fmt, name in _GGML_TYPE_NAMES.items():
        if int(getattr(g, name)) == t:
            return fmt
    return f"ggml_type {t}"


def _c_string(g, name: str) -> str | None:
    fn = _c_function(g, name, [], ctypes.c_char_p, prefer_package=False)
    if fn is None:
        return None
    out = fn()
    return out.decode() if out else None


# ---------------------------------------------------------------------------------------------
# What is there
# ---------------------------------------------------------------------------------------------


def available() -> dict:
    """What works here, without raising.

    Keys: ``importable``, ``package`` ("ggml-python" / "ggml-py" / "ggml (standalone build,
    ctypes)"), ``version`` (the Python package's; the standalone build's ggml version),
    ``ggml_version`` and ``ggml_commit`` (of the C library, from its ``ggml_version()`` and
    ``ggml_commit()``), ``lib_dir`` and ``build`` (standalone build only: the library folder and
    its ``ggml-build.json``, with the source, ``commit``, ``cmake_flags``, compilers),
    ``cmake_flags`` (the build's, where known), ``cpu_backend``, ``cuda_backend``,
    ``cuda_devices``, ``type_traits`` (so :func:`ggml_vec_dot` and Q8_1 quantization work),
    ``error`` (why not, where something fails).
    """
    info = {
        "importable": False,
        "package": None,
        "version": None,
        "ggml_version": None,
        "ggml_commit": None,
        "lib_dir": None,
        "build": None,
        "cmake_flags": None,
        "cpu_backend": False,
        "cuda_backend": False,
        "cuda_devices": 0,
        "type_traits": False,
        "error": None,
    }
    try:
        g = _ggml()
    except GgmlUnavailable as e:
        info["error"] = str(e)
        return info
    info.update(
        importable=True,
        package=_package_name(g),
        version=getattr(g, "__version__", None),
        ggml_version=_c_string(g, "ggml_version"),
        ggml_commit=_c_string(g, "ggml_commit"),
    )
    if hasattr(g, "LIB_DIR"):  # the standalone build
        build = g.BUILD_INFO or {}
        info.update(lib_dir=str(g.LIB_DIR), build=g.BUILD_INFO, cmake_flags=build.get("cmake_flags"))
        if info["ggml_commit"] in (None, "unknown"):
            info["ggml_commit"] = build.get("commit", info["ggml_commit"])
    try:
        backend = g.ggml_backend_cpu_init()
        if backend:
            info["cpu_backend"] = True
            g.ggml_backend_free(backend)
    except Exception as e:  # noqa: BLE001 - report, never raise, from here
        info["error"] = f"CPU backend: {type(e).__name__}: {e}"
    try:
        if getattr(g, "GGML_USE_CUDA", False):
            info["cuda_devices"] = int(g.ggml_backend_cuda_get_device_count())
            info["cuda_backend"] = info["cuda_devices"] > 0
    except Exception as e:  # noqa: BLE001
        info["error"] = f"CUDA backend: {type(e).__name__}: {e}"
    try:
        _type_traits_cpu(g, _type(g, "q4_0"))
        _type_traits(g, _type(g, "q8_1"))
        info["type_traits"] = True
    except Exception as e:  # noqa: BLE001
        info["error"] = info["error"] or f"type traits: {e}"
    return info


# ---------------------------------------------------------------------------------------------
# Quantizers and the CPU dot product
# ---------------------------------------------------------------------------------------------


def _f32_rows(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    x = np.ascontiguousarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [rows, K], got shape {x.shape}")
    return x


def _float_ptr(x: np.ndarray):
    return x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def ggml_quantize(x, fmt: str, ref: bool = True) -> np.ndarray:
    """ggml's quantizer: float32 ``[rows, K]`` -> uint8 ``[rows, K/32 * block_bytes]``.

    ``ref=True`` (default), the reference quantizers our formats follow. Q4_0, Q4_1, Q8_0, Q4_K,
    Q6_K: ``ggml_quantize_chunk`` (what llama-quantize calls; with no importance matrix it runs
    ``quantize_row_*_ref``). Q8_1 and Q8_K are never stored in a file, so they have no chunk
    quantizer: we call their type traits' ``from_float_ref``, ``quantize_row_q8_1_ref`` (s = d *
    sum(q)) and ``quantize_row_q8_K_ref``.

    ``ref=False``: the CPU backend's own ``from_float`` (SIMD), the one ``mul_mat`` applies to
    the activations. It computes ``127 / amax`` instead of ``1 / (amax / 127)`` and may round a
    value that sits near half a step the other way: a rare one-step difference in a byte.
    """
    g = _ggml()
    x = _f32_rows(x, "x")
    rows, K = x.shape
    if fmt not in F.SPECS:
        raise ValueError(f"fmt must be one of {F.FORMATS}, got {fmt!r}")
    out = np.zeros((rows, F.row_bytes(fmt, K)), np.uint8)  # raises unless K is whole blocks
    dst = out.ctypes.data_as(ctypes.c_void_p)
    if not ref:
        _type_traits_cpu(g, _type(g, fmt)).from_float(_float_ptr(x), dst, rows * K)
    elif fmt in _NOT_STORED:
        _row_function(g, fmt, "from_float_ref", "quantize_row_{}_ref", _from_float_t)(_float_ptr(x), dst, rows * K)
    else:
        g.ggml_quantize_chunk(_type(g, fmt), _float_ptr(x), dst, 0, rows, K, None)
    return out


def ggml_dequantize(q, fmt: str) -> np.ndarray:
    """ggml's dequantizer (``dequantize_row_*``, the type traits' ``to_float``): uint8 blocks
    ``[rows, K/block_size * block_bytes]`` -> float32 ``[rows, K]``."""
    g = _ggml()
    if fmt not in F.SPECS:
        raise ValueError(f"fmt must be one of {F.FORMATS}, got {fmt!r}")
    if hasattr(q, "detach"):
        q = q.detach().cpu().numpy()
    q = np.ascontiguousarray(q)
    if q.dtype != np.uint8 or q.ndim != 2:
        raise ValueError(f"q must be uint8 [rows, row bytes], got {q.dtype} {q.shape}")
    K = F.spec(fmt).k_of(q.shape[1])  # raises unless the rows are whole blocks
    out = np.zeros((q.shape[0], K), np.float32)
    to_float = _row_function(g, fmt, "to_float", "dequantize_row_{}", _to_float_t)
    to_float(q.ctypes.data_as(ctypes.c_void_p), _float_ptr(out), q.shape[0] * K)
    return out


def _row_function(g, fmt: str, trait: str, c_name: str, proto):
    """A row function of ggml's type ``fmt``: the type traits' ``trait`` (from_float_ref, to_float)
    where it is set, else the exported C function ``c_name`` (``quantize_row_q8_K_ref``: Q8_K's
    traits name neither). Raises :class:`GgmlUnavailable` rather than call a null pointer."""
    fn = getattr(_type_traits(g, _type(g, fmt)), trait)
    if fn:
        return fn
    name = c_name.format(_C_NAMES.get(fmt, fmt))
    argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
    if trait == "from_float_ref":
        argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_int64]
    fn = _c_function(g, name, argtypes, None, prefer_package=False)
    if fn is None:
        raise GgmlUnavailable(f"this ggml has no {trait} for {fmt} and does not export {name}")
    return fn


def ggml_vec_dot_type(wfmt: str) -> str:
    """The activation format ggml's CPU backend pairs with weights of ``wfmt`` (Q8_0 for Q4_0)."""
    g = _ggml()
    return _type_name(g, _type_traits_cpu(g, _type(g, wfmt)).vec_dot_type)


def ggml_vec_dot(wfmt: str, w_row, a_row) -> float:
    """One dot product by ggml's CPU kernel: a weight row (our bytes, or float32 for ``"f32"``)
    with a float32 activation row, which is first quantized to the CPU ``vec_dot_type`` with
    that type's ``from_float``, exactly what ``mul_mat`` does for each activation row.

    Raises :class:`GgmlUnavailable` where the package cannot reach the type traits.
    """
    g = _ggml()
    if wfmt not in MUL_MAT_FORMATS:
        raise ValueError(f"wfmt must be one of {MUL_MAT_FORMATS}, got {wfmt!r}")
    a = _f32_rows(np.asarray(a_row, np.float32).reshape(1, -1), "a_row")
    K = a.shape[1]
    w = np.ascontiguousarray(np.asarray(w_row).reshape(-1))
    if wfmt == "f32":
        w = w.astype(np.float32, copy=False)
        if w.size != K:
            raise ValueError(f"w_row has {w.size} values, a_row has {K}")
    else:
        nbytes = F.row_bytes(wfmt, K)  # raises unless K is whole blocks
        if w.dtype != np.uint8 or w.size != nbytes:
            raise ValueError(
                f"w_row must be the {nbytes} bytes of one {wfmt} row of K={K}, got {w.size} values of {w.dtype}"
            )
    wt = _type(g, wfmt)
    traits = _type_traits_cpu(g, wt)
    vdt = traits.vec_dot_type
    if vdt == _type(g, "f32"):
        y = a
    else:
        y = np.zeros(g.ggml_row_size(vdt, K), np.uint8)
        _type_traits_cpu(g, vdt).from_float(_float_ptr(a), y.ctypes.data_as(ctypes.c_void_p), K)
    s = ctypes.c_float(0.0)
    traits.vec_dot(K, ctypes.byref(s), 0, w.ctypes.data_as(ctypes.c_void_p), 0, y.ctypes.data_as(ctypes.c_void_p), 0, 1)
    return float(s.value)


# ---------------------------------------------------------------------------------------------
# mul_mat: one graph on one backend
# ---------------------------------------------------------------------------------------------


def _default_threads() -> int:
    import torch

    return torch.get_num_threads()


def _weights(g, W, wfmt: str) -> tuple[np.ndarray, int, int]:
    """W as the bytes ggml will hold, with (M, K). Float weights in a quantized format are
    quantized by ggml itself; bytes are used as given (the same bytes our kernels read)."""
    if wfmt not in MUL_MAT_FORMATS:
        raise ValueError(f"wfmt must be one of {MUL_MAT_FORMATS}, got {wfmt!r}")
    if hasattr(W, "detach"):
        W = W.detach().cpu().numpy()
    W = np.ascontiguousarray(W)
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D, got shape {W.shape}")
    if wfmt == "f32":
        if W.dtype != np.float32:
            raise TypeError(f"W must be float32 for wfmt='f32', got {W.dtype}")
        return W, W.shape[0], W.shape[1]
    if W.dtype == np.float32:
        W = ggml_quantize(W, wfmt)
    if W.dtype != np.uint8:
        raise TypeError(f"W must be uint8 {wfmt} bytes (quantize(W, {wfmt!r})) or float32, got {W.dtype}")
    return W, W.shape[0], F.spec(wfmt).k_of(W.shape[1])  # raises unless the row is whole blocks


def _parse_backend(backend: str) -> tuple[str, int]:
    kind, _, idx = backend.partition(":")
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda[:index]', got {backend!r}")
    return kind, int(idx or 0)


class _MulMatGraph:
    """A ggml context with ``copies`` weight tensors ``a_i``, one activation tensor ``b`` and the
    nodes ``c_i = mul_mat(a_i, b)``; a graph computing ``c_0 .. c_{C-1}`` in that order, the whole
    sequence ``repeats`` times (``ggml_graph_add_node`` of the same nodes, as test-backend-ops
    perf does); and a backend buffer holding the tensors. ``a`` and ``c`` are copy 0's tensors,
    ``a_copies`` and ``c_copies`` all of them."""

    def __init__(
        self,
        g,
        wtype: int,
        M: int,
        N: int,
        K: int,
        backend: str,
        n_threads: int | None,
        repeats: int = 1,
        copies: int = 1,
        repack: bool = False,
    ):
        self.g, self.ctx, self.backend, self.buffer = g, None, None, None
        self.ctx_w = self.buffer_w = None  # repack: the weights' own context and CPU_REPACK buffer
        self.M, self.N, self.K = M, N, K
        kind, index = _parse_backend(backend)
        self.kind = kind
        try:
            if kind == "cpu":
                self.backend = g.ggml_backend_cpu_init()
                if not self.backend:
                    raise GgmlUnavailable("ggml_backend_cpu_init failed")
                self.n_threads = int(n_threads or _default_threads())
                g.ggml_backend_cpu_set_n_threads(self.backend, self.n_threads)
            else:
                if not getattr(g, "GGML_USE_CUDA", False):
                    raise GgmlUnavailable(
                        f"this ggml ({_package_name(g)} {getattr(g, '__version__', '?')}) "
                        "was built without CUDA: build it with -DGGML_CUDA=on"
                    )
                self.backend = g.ggml_backend_cuda_init(index)
                if not self.backend:
                    raise GgmlUnavailable(f"ggml_backend_cuda_init({index}) failed (no such GPU?)")
                self.n_threads = None
            n_nodes = copies * repeats
            graph_size = n_nodes + copies + 8  # the node slots, the C + 1 leaves, room to spare
            params = g.ggml_init_params(
                mem_size=g.ggml_tensor_overhead() * (2 * copies + 8) + g.ggml_graph_overhead_custom(graph_size, False),
                mem_buffer=None,
                no_alloc=True,
            )  # tensor data lives in the backend buffer
            self.ctx = g.ggml_init(params)
            if not self.ctx:
                raise MemoryError("ggml_init failed")
            wctx = self.ctx
            if repack:
                repack_buft = _repack_buffer_type(g, wtype, M, kind)
                wparams = g.ggml_init_params(
                    mem_size=g.ggml_tensor_overhead() * (copies + 2), mem_buffer=None, no_alloc=True
                )
                self.ctx_w = wctx = g.ggml_init(wparams)
                if not self.ctx_w:
                    raise MemoryError("ggml_init failed")
            self.a = g.ggml_new_tensor_2d(wctx, wtype, K, M)
            self.b = g.ggml_new_tensor_2d(self.ctx, _type(g, "f32"), K, N)
            self.c = g.ggml_mul_mat(self.ctx, self.a, self.b)
            self.graph = g.ggml_new_graph_custom(self.ctx, graph_size, False)
            g.ggml_build_forward_expand(self.graph, self.c)
            self.a_copies, self.c_copies = [self.a], [self.c]
            for _ in range(copies - 1):  # copies 1 .. C-1: their own weights, the same b, after c_0
                self.a_copies.append(g.ggml_new_tensor_2d(wctx, wtype, K, M))
                self.c_copies.append(g.ggml_mul_mat(self.ctx, self.a_copies[-1], self.b))
                g.ggml_build_forward_expand(self.graph, self.c_copies[-1])
            add_node = _c_function(g, "ggml_graph_add_node", [ctypes.c_void_p, ctypes.c_void_p], None)
            if repeats > 1 and add_node is None:
                raise GgmlUnavailable("ggml_graph_add_node is not exported: cannot repeat the nodes")
            for _ in range(repeats - 1):
                for c in self.c_copies:
                    add_node(self.graph, c)
            count = _c_function(g, "ggml_graph_n_nodes", [ctypes.c_void_p], ctypes.c_int)
            if count is not None and count(self.graph) != n_nodes:
                raise RuntimeError(f"the graph has {count(self.graph)} nodes, expected {copies} x {repeats}")
            if repack:  # the weights in CPU_REPACK: ggml_backend_tensor_set rewrites them as llama.cpp's loader does
                alloc = _c_function(
                    g,
                    "ggml_backend_alloc_ctx_tensors_from_buft",
                    [ctypes.c_void_p, ctypes.c_void_p],
                    ctypes.c_void_p,
                    prefer_package=False,
                )
                self.buffer_w = alloc(self.ctx_w, repack_buft)
                if not self.buffer_w:
                    raise MemoryError(f"ggml could not allocate the CPU_REPACK buffer for {copies} x M={M}, K={K}")
            self.buffer = g.ggml_backend_alloc_ctx_tensors(self.ctx, self.backend)
            if not self.buffer:
                raise MemoryError(f"ggml could not allocate the {backend} buffer for {copies} x M={M}, N={N}, K={K}")
        except BaseException:
            self.close()
            raise

    def set(self, tensor, array: np.ndarray) -> None:
        nbytes = self.g.ggml_nbytes(tensor)
        if array.nbytes != nbytes:
            raise ValueError(f"ggml expects {nbytes} bytes, got {array.nbytes}")
        self.g.ggml_backend_tensor_set(tensor, array.ctypes.data_as(ctypes.c_void_p), 0, nbytes)

    def compute(self) -> None:
        status = self.g.ggml_backend_graph_compute(self.backend, self.graph)
        if status not in (None, 0):  # GGML_STATUS_SUCCESS
            raise RuntimeError(f"ggml_backend_graph_compute failed with status {status}")
        if self.kind == "cuda":
            self.g.ggml_backend_synchronize(self.backend)

    def result(self, i: int = 0) -> np.ndarray:
        c = self.c_copies[i]
        out = np.empty((self.N, self.M), np.float32)
        self.g.ggml_backend_tensor_get(c, out.ctypes.data_as(ctypes.c_void_p), 0, self.g.ggml_nbytes(c))
        return out

    def close(self) -> None:
        g = self.g
        if self.buffer:
            g.ggml_backend_buffer_free(self.buffer)
        if self.buffer_w:
            g.ggml_backend_buffer_free(self.buffer_w)
        if self.ctx_w:
            g.ggml_free(self.ctx_w)
        self.buffer_w = self.ctx_w = None
        if self.backend:
            g.ggml_backend_free(self.backend)
        if self.ctx:
            g.ggml_free(self.ctx)
        self.buffer = self.backend = self.ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _repack_buffer_type(g, wtype: int, M: int, kind: str):
    """ggml-cpu's CPU_REPACK buffer type, for weights ``wtype`` with ``M`` rows on this CPU, or a
    GgmlUnavailable saying why not. llama.cpp's loader puts weights there by default: Q4_0 is rewritten
    into 8 interleaved rows (block_q4_0x8) where the CPU has AVX2, into 4 rows on ARM with the dot
    product or i8mm, and so is Q8_0 on ARM (ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type).
    A type it does not repack here would crash in ggml (a null repack), so only those pass."""
    if kind != "cpu":
        raise ValueError("repack is a CPU backend feature: use backend='cpu'")
    name = _type_name(g, wtype).lower()

    def has(feature):
        fn = _c_function(g, f"ggml_cpu_has_{feature}", [], ctypes.c_int, prefer_package=False)
        return bool(fn and fn())

    if name == "q4_0" and has("avx2"):
        rows = 8
    elif name in ("q4_0", "q8_0") and has("neon") and (has("dotprod") or has("matmul_int8")):
        rows = 4
    else:
        raise GgmlUnavailable(f"ggml repacks no {name} weights on this CPU (Q4_0 with AVX2; Q4_0, Q8_0 on ARM)")
    if M % rows:
        raise GgmlUnavailable(f"ggml repacks {name} weights in groups of {rows} rows: M={M} is not a multiple")
    fns = {
        "ggml_backend_cpu_reg": ([], ctypes.c_void_p),
        "ggml_backend_reg_dev_get": ([ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
        "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
        "ggml_backend_buft_name": ([ctypes.c_void_p], ctypes.c_char_p),
    }
    f = {n: _c_function(g, n, a, r, prefer_package=False) for n, (a, r) in fns.items()}
    if None in f.values():
        raise GgmlUnavailable("this ggml does not export the backend registry functions repack needs")
    reg = f["ggml_backend_cpu_reg"]()
    addr = f["ggml_backend_reg_get_proc_address"](reg, b"ggml_backend_dev_get_extra_bufts")
    if not addr:
        raise GgmlUnavailable("this ggml's CPU backend has no extra buffer types")
    extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(addr)
    bufts = extra(f["ggml_backend_reg_dev_get"](reg, 0))
    i = 0
    while bufts and bufts[i]:
        if f["ggml_backend_buft_name"](bufts[i]) == b"CPU_REPACK":
            return bufts[i]
        i += 1
    raise GgmlUnavailable("this ggml was built without the CPU_REPACK buffer type (GGML_CPU_REPACK off)")


def _prepare(Ws: list, A, wfmt: str):
    """Checked inputs: (g, the weights as ggml's bytes, one array per copy, A, M, N, K)."""
    g = _ggml()
    Wbs = []
    for i, W in enumerate(Ws):
        try:
            Wb, M, K = _weights(g, W, wfmt)
        except (TypeError, ValueError) as e:
            if len(Ws) == 1:
                raise
            raise type(e)(f"Ws[{i}]: {e}") from None
        if Wbs and (Wb.shape, Wb.dtype) != (Wbs[0].shape, Wbs[0].dtype):
            raise ValueError(
                f"Ws[{i}] is {Wb.dtype} {Wb.shape}, Ws[0] is {Wbs[0].dtype} {Wbs[0].shape}: "
                "the copies must have the same shape"
            )
        Wbs.append(Wb)
    A = _f32_rows(A, "A")
    if A.shape[1] != K:
        raise ValueError(f"A and W disagree on K: A [N, K] has K={A.shape[1]}, W [M, K] has K={K}")
    if A.shape[0] == 0 or M == 0:
        raise ValueError(f"empty GEMM: M={M}, N={A.shape[0]}")
    return g, Wbs, A, M, A.shape[0], K


def _one_matrix(W):
    if isinstance(W, (list, tuple)):
        raise TypeError("W must be one weight matrix (an array), not a list; MulMatRunner takes a list of copies")
    return [W]


class MulMatRunner:
    """ggml's ``mul_mat`` on ``C`` copies of the weights in one graph: cold-cache timing.

    ``Ws`` is one weight matrix or a list of ``C`` of the same shape, each what
    :func:`ggml_mul_mat` takes (our quantized bytes, uint8 ``[M, K/32*block_bytes]``, or float32
    ``[M, K]``); ``A`` is float32 ``[N, K]`` (numpy or a CPU torch tensor). The graph computes
    ``c_i = mul_mat(a_i, b)`` for ``i = 0 .. C-1`` with one shared ``b`` (= A), in that order,
    and that sequence ``repeats`` times, so one :meth:`compute` runs ``n_mul_mats = C * repeats``
    mul_mats back to back, each on its own weights: when the copies together exceed the L2
    cache, every mul_mat reads its weights from memory. ``C = 1`` with ``repeats > 1`` is
    test-backend-ops perf (the same weights each time, hot in L2 when they fit). Each node
    quantizes ``b`` itself, as in test-backend-ops. A context manager; :meth:`close` frees it.
    ``repack=True`` (CPU): the weights go into ggml-cpu's CPU_REPACK buffer, where llama.cpp's model
    loader puts them by default, so mul_mat runs the repacked kernels (Q4_0 as 8 interleaved rows
    with AVX2; Q4_0 and Q8_0 as 4 on ARM); :func:`_repack_buffer_type` refuses where ggml repacks nothing.

    ::

        with MulMatRunner([Wq] * 8, A, "q4_0", backend="cuda", repeats=4) as run:
            run.compute()                                  # warm up
            t0 = time.perf_counter(); run.compute(); s = (time.perf_counter() - t0) / run.n_mul_mats
            C3 = run.result(3)                             # float32 [N, M]
    """

    def __init__(
        self,
        Ws,
        A,
        wfmt: str,
        backend: str = "cpu",
        repeats: int = 1,
        n_threads: int | None = None,
        repack: bool = False,
    ):
        if isinstance(Ws, (list, tuple)):
            if not Ws:
                raise ValueError("Ws is empty: give one weight matrix or a list of at least one")
            Ws = list(Ws)
        else:
            Ws = [Ws]
        if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)):
            raise TypeError(f"repeats must be an int, got {type(repeats).__name__}")
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        g, Wbs, A, M, N, K = _prepare(Ws, A, wfmt)
        self.copies, self.repeats, self.n_mul_mats = len(Wbs), int(repeats), len(Wbs) * int(repeats)
        self.M, self.N, self.K, self.wfmt, self.backend = M, N, K, wfmt, backend
        self._mm = _MulMatGraph(
            g, _type(g, wfmt), M, N, K, backend, n_threads, repeats=self.repeats, copies=self.copies, repack=repack
        )
        try:
            for a, Wb in zip(self._mm.a_copies, Wbs):
                self._mm.set(a, Wb)
            self._mm.set(self._mm.b, A)
        except BaseException:
            self.close()
            raise
        self.n_threads = self._mm.n_threads

    def compute(self) -> None:
        """One ``ggml_backend_graph_compute`` (then a synchronize on CUDA): ``n_mul_mats`` mul_mats."""
        if self._mm.ctx is None:
            raise RuntimeError("this MulMatRunner is closed")
        self._mm.compute()

    def result(self, i: int = 0) -> np.ndarray:
        """``c_i`` (copy ``i``'s output) of the last compute, float32 ``[N, M]``."""
        if self._mm.ctx is None:
            raise RuntimeError("this MulMatRunner is closed")
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.copies:
            raise IndexError(f"copy index {i!r} out of range for {self.copies} copies")
        return self._mm.result(int(i))

    def close(self) -> None:
        self._mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ggml_mul_mat(
    W, A, wfmt: str, backend: str = "cpu", n_threads: int | None = None, repack: bool = False
) -> np.ndarray:
    """``C [N, M]`` computed by ggml's ``mul_mat`` on a backend ("cpu", "cuda", "cuda:1").

    ``W`` is our quantized bytes (``quantize(W, wfmt)``, uint8 ``[M, K/32*block_bytes]``; ggml gets
    exactly these bytes) or float32 ``[M, K]`` (for ``"f32"``, or to let ggml quantize it). ``A``
    is float32 ``[N, K]``; ggml quantizes it itself to its ``vec_dot_type``. ``repack`` (CPU): the weights
    in CPU_REPACK, as llama.cpp loads them (see :class:`MulMatRunner`). ``n_threads`` (CPU)
    defaults to ``torch.get_num_threads()``.
    """
    with MulMatRunner(_one_matrix(W), A, wfmt, backend, n_threads=n_threads, repack=repack) as run:
        run.compute()
        return run.result()


def perf_repeats(M: int, N: int, K: int, backend: str = "cpu") -> int:
    """How many times test-backend-ops perf repeats a MUL_MAT node in one graph: enough to reach
    8 GFLOP (CPU) or 100 GFLOP (GPU) per graph compute, plus one (capped, as it caps by graph size)."""
    kind, _ = _parse_backend(backend)
    return int(min(_MAX_REPEATS - 1, _TARGET_FLOPS[kind] // (2.0 * M * N * K)) + 1)


def time_ggml_mul_mat(
    W,
    A,
    wfmt: str,
    backend: str = "cpu",
    n_threads: int | None = None,
    reps: int | None = None,
    warmup: int = 1,
    computes: int = 5,
    min_time_s: float = 0.0,
    repack: bool = False,
) -> float:
    """Seconds per ``mul_mat``, timed the way llama.cpp's ``test-backend-ops perf`` times it.

    One graph holds the same ``mul_mat`` node ``reps`` times (default :func:`perf_repeats`);
    each ``ggml_backend_graph_compute`` runs them back to back, so the cost of starting the
    graph (threads on the CPU, launches on a GPU) is shared. After ``warmup`` computes, the
    median of ``computes`` computes (at least, and until ``min_time_s`` has passed), divided by
    ``reps``. test-backend-ops reports the mean over about a second; the median resists noise
    from other processes. The activation quantization ggml does inside ``mul_mat`` is included.
    The weights stay hot in L2 where they fit; :class:`MulMatRunner` with copies times them cold.
    """
    _, (Wb,), A, M, N, K = _prepare(_one_matrix(W), A, wfmt)
    R = int(reps) if reps else perf_repeats(M, N, K, backend)
    if R < 1 or computes < 1:
        raise ValueError(f"reps and computes must be >= 1, got {R} and {computes}")
    with MulMatRunner(Wb, A, wfmt, backend, repeats=R, n_threads=n_threads, repack=repack) as run:
        for _ in range(warmup):
            run.compute()
        times = []
        t_start = time.perf_counter()
        while len(times) < computes or (time.perf_counter() - t_start) < min_time_s:
            t0 = time.perf_counter()
            run.compute()
            times.append(time.perf_counter() - t0)
            if len(times) >= 1000:
                break
    return statistics.median(times) / R


def info_line() -> str:
    """One line for a notebook or a results header: which ggml, which backends."""
    a = available()
    if not a["importable"]:
        return f"ggml: not available ({a['error']})"
    backends = ", ".join(b for b, ok in (("CPU", a["cpu_backend"]), ("CUDA", a["cuda_backend"])) if ok) or "none"
    if a["lib_dir"]:  # the standalone build
        src = (a["build"] or {}).get("source", "source unrecorded")
        return (
            f"ggml {a['ggml_version'] or '?'} (commit {a['ggml_commit']}; {src}) via {a['package']} "
            f"from $QUANTGEMM_GGML_LIB (backends: {backends})"
        )
    return f"ggml {a['ggml_version'] or '?'} via {a['package']} {a['version']} (backends: {backends})"


__all__ = [
    "GgmlUnavailable",
    "MUL_MAT_FORMATS",
    "MulMatRunner",
    "WEIGHT_FORMATS",
    "available",
    "ggml_dequantize",
    "ggml_mul_mat",
    "ggml_quantize",
    "ggml_vec_dot",
    "ggml_vec_dot_type",
    "info_line",
    "perf_repeats",
    "time_ggml_mul_mat",
]
