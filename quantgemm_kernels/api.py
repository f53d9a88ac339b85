"""The public functions: quantize, dequantize, gemm, gemm_quantized, and for models QTensor + linear.

Every function checks its inputs here, before anything is compiled or launched, and raises a
``TypeError`` (wrong dtype or type) or ``ValueError`` (wrong device, shape, K, layout, name) that
names the argument, what was expected and what came. The compiled operators check again.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import torch

from . import formats as F
from ._build import load_extension
from .registry import KERNELS, Kernel

_SUM_MODE = {"d_sum_q": 0, "sum_x": 1}
# Largest |x| whose scale still fits in fp16 (65504): d = max / scale_div (8 for Q4_0, 127 for Q8_*;
# None for the K-quants, whose scales come from a search: quantize reads the stored scales instead).
_FP16_MAX = 65504.0


def _ops():
    return load_extension()["ops"]


def cuda_kernels_built() -> bool:
    """True when the loaded extension includes the CUDA kernels (builds it if needed)."""
    return load_extension()["with_cuda"]


def _check_tensor(t, name: str, dtype: torch.dtype) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} must be on a CPU or CUDA device, got {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major), got strides {t.stride()}: call .contiguous()")


def _check_fmt(fmt) -> F.Format:
    if fmt not in F.SPECS:
        raise ValueError(f"fmt must be one of {F.FORMATS}, got {fmt!r}")
    return F.SPECS[fmt]


def _check_k(K: int, name: str, block_size: int = F.QK) -> None:
    if K == 0 or K % block_size:
        raise ValueError(f"{name}: K ({K}) must be a positive multiple of {block_size}, the block size")


def _check_device(t: torch.Tensor, name: str, f: F.Format | None = None) -> None:
    if t.device.type == "cuda" and not cuda_kernels_built():
        raise ValueError(
            f"{name} is on {t.device} but the CUDA kernels are not built here "
            "(no nvcc/CUDA torch, or QUANTGEMM_NO_CUDA=1); move it to the CPU"
        )
    if t.device.type == "cuda" and f is not None and not f.cuda:
        raise ValueError(f"{name} is on {t.device}, but {f.name} has no CUDA quantizer/dequantizer yet; use the CPU")


def quantize(x: torch.Tensor, fmt: str, *, q8_1_sum: str = "d_sum_q", check_finite: bool = True) -> torch.Tensor:
    """Quantize float32 rows ``x [rows, K]`` to llama.cpp's blocks, on x's device.

    Returns uint8 ``[rows, K // block_size * block_bytes]`` (block_size 32; 256 for the K-quants)
    holding exactly llama.cpp's bytes.
    ``q8_1_sum`` picks what a Q8_1 block's ``s`` holds: ``"d_sum_q"`` (d * sum(q), llama.cpp's
    reference quantizer; default) or ``"sum_x"`` (sum of x, ggml-cuda's activation quantizer).
    Non-finite input raises (llama.cpp's result for it is undefined); a scale beyond fp16's range
    is stored as inf, as llama.cpp stores it, with a warning.
    """
    _check_tensor(x, "x", torch.float32)
    f = _check_fmt(fmt)
    if q8_1_sum not in _SUM_MODE:
        raise ValueError(f"q8_1_sum must be one of {tuple(_SUM_MODE)}, got {q8_1_sum!r}")
    _check_k(x.shape[1], "x", f.block_size)
    _check_device(x, "x", f)
    if x.numel() and check_finite:
        amax = float(x.abs().max())
        if not math.isfinite(amax):
            raise ValueError("x contains NaN or Inf: llama.cpp's quantizers give undefined bytes for them")
        if f.scale_div is not None and amax / f.scale_div > _FP16_MAX:
            _warn_scale_overflow(amax, fmt)
        elif "s" in f.header and amax * f.block_size > 0.99 * _FP16_MAX:
            # s (d*sum(q) or sum(x)) is about the block's sum: it overflows fp16 long before d does
            # (it cannot while block_size * max |x| stays below; then this second pass is skipped)
            block_sum = float(x.reshape(-1, f.block_size).sum(dim=1).abs().max())
            if block_sum > 0.99 * _FP16_MAX:
                warnings.warn(
                    f"a Q8_1 block sums to {block_sum:.3g}: its s field overflows fp16 and is stored "
                    "as inf (as llama.cpp stores it); GEMMs using it give inf",
                    RuntimeWarning,
                    stacklevel=2,
                )
    q = _ops().quantize(x, fmt, _SUM_MODE[q8_1_sum])
    if f.scale_div is None and x.numel() and check_finite and _non_finite_scales(q, f).any():
        _warn_scale_overflow(amax, fmt)  # scales found by a search (K-quants): read off the bytes
    return q


def _warn_scale_overflow(amax: float, fmt: str) -> None:
    warnings.warn(
        f"max |x| = {amax:.3g}: the {fmt} scale overflows fp16 and is stored as inf "
        "(as llama.cpp stores it); those blocks dequantize to inf/nan",
        RuntimeWarning,
        stacklevel=3,
    )


def _non_finite_scales(q: torch.Tensor, f: F.Format) -> torch.Tensor:
    """Per block of ``q``: whether one of its scale fields (``f.header``: fp16, or float32) is inf or NaN."""
    blocks = q.reshape(-1, f.block_bytes)
    bad = torch.zeros(blocks.shape[0], dtype=torch.bool, device=q.device)
    for name in f.header:  # each an fp16 or float32 field, wherever it sits in the block
        ftype, off = f.dtype.fields[name][:2]
        size, (exp_mask, exp_bits) = ftype.itemsize, {2: (0x7FFF, 0x7C00), 4: (0x7FFFFFFF, 0x7F800000)}[ftype.itemsize]
        raw = blocks[:, off : off + size].contiguous().view(torch.int16 if size == 2 else torch.int32)
        bad |= ((raw.to(torch.int64) & exp_mask) >= exp_bits).any(dim=1)  # exponent all ones: inf or NaN
    return bad


def dequantize(q: torch.Tensor, fmt: str) -> torch.Tensor:
    """Inverse of :func:`quantize`: uint8 blocks ``[rows, K/block_size*block_bytes]`` -> float32 ``[rows, K]``."""
    _check_tensor(q, "q", torch.uint8)
    f = _check_fmt(fmt)
    if q.shape[1] == 0 or q.shape[1] % f.block_bytes:
        raise ValueError(
            f"q: a row of {q.shape[1]} bytes is not a whole number of {fmt} blocks ({f.block_bytes} B each)"
        )
    _check_device(q, "q", f)
    return _ops().dequantize(q, fmt)


def validate_blocks(q: torch.Tensor, fmt: str) -> None:
    """Reject blocks whose scales (the format's ``header`` fields: d, Q8_1's s, Q4_K's dmin) are
    inf or NaN, as llama.cpp's ``ggml_validate_row_data`` does when it loads a model. Use it on
    bytes from outside."""
    _check_tensor(q, "q", torch.uint8)
    f = _check_fmt(fmt)
    bb = f.block_bytes
    if q.shape[1] % bb:
        raise ValueError(f"q: a row of {q.shape[1]} bytes is not a whole number of {fmt} blocks ({bb} B each)")
    bad = _non_finite_scales(q, f)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"q: block {i} (row {i // (q.shape[1] // bb)}) has a non-finite scale; "
            "llama.cpp's ggml_validate_row_data rejects such data too"
        )


def _kernel(kernel) -> Kernel:
    if isinstance(kernel, Kernel):
        kernel = kernel.name
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; see quantgemm_kernels.KERNELS for the {len(KERNELS)} names")
    return KERNELS[kernel]


def _check_operand(t, name: str, fmt: str) -> int:
    """Check one GEMM operand in format ``fmt``; return its K."""
    if fmt in ("f32", "f16"):
        _check_tensor(t, name, torch.float32 if fmt == "f32" else torch.float16)
        K = t.shape[1]
    else:
        _check_tensor(t, name, torch.uint8)
        f = F.SPECS[fmt]
        if t.shape[1] % f.block_bytes:
            raise ValueError(
                f"{name}: a row of {t.shape[1]} bytes is not a whole number of {fmt} blocks "
                f"({f.block_bytes} B each); pass the output of quantize(W, {fmt!r})"
            )
        K = t.shape[1] // f.block_bytes * f.block_size
    # f32 operands: K a multiple of 32 as well, the tile every kernel of the course steps K by
    _check_k(K, name, F.QK if fmt in ("f32", "f16") else F.SPECS[fmt].block_size)
    return K


def _weights(W, k: Kernel):
    """The tensor inside a QTensor, after checking that its format is the kernel's."""
    if isinstance(W, QTensor):
        if W.fmt != k.wfmt:
            raise ValueError(f"kernel {k.name!r} reads {k.wfmt} weights, W is a {W.fmt} QTensor")
        return W.data
    return W


def _check_pair(A, W, k: Kernel, afmt: str) -> None:
    Ka = _check_operand(A, "A", afmt)
    Kw = _check_operand(W, "W", k.wfmt)
    if Ka != Kw:
        raise ValueError(f"A and W disagree on K: A [N, K] has K={Ka}, W [M, K] has K={Kw}")
    if A.device != W.device:
        raise ValueError(f"A and W must be on the same device, got A on {A.device} and W on {W.device}")
    if A.device.type != k.device:
        raise ValueError(f"kernel {k.name!r} runs on {k.device}, but the inputs are on {A.device}")
    _check_device(A, "A")
    if k.device == "cuda":
        for t, name in ((A, "A"), (W, "W")):
            if t.data_ptr() % 16:
                raise ValueError(
                    f"{name}'s data must start on a 16-byte boundary for the CUDA kernels "
                    "(it is a view at an offset): pass a .clone()"
                )


def _check_sm(A: torch.Tensor, k: Kernel) -> None:
    if A.device.type != "cuda" or k.runs_on(torch.cuda.get_device_capability(A.device)):
        return
    cc = ".".join(map(str, torch.cuda.get_device_capability(A.device)))
    if k.min_sm == k.max_sm:
        raise ValueError(
            f"kernel {k.name!r} runs on compute capability {k.min_sm[0]}.{k.min_sm[1]} only "
            f"(arch-specific code), {A.device} is {cc}"
        )
    raise ValueError(
        f"kernel {k.name!r} needs compute capability {k.min_sm[0]}.{k.min_sm[1]} or newer, {A.device} is {cc}"
    )


def gemm(A: torch.Tensor, W: torch.Tensor, kernel: str, *, q8_1_sum: str | None = None) -> torch.Tensor:
    """``C [N, M] = A [N, K] @ W [M, K]^T`` with a registered kernel (a name from ``KERNELS``).

    ``A`` is float32 (the fp16 step, afmt ``"f16"``, also takes float16 ``A``: then it skips its
    conversion pass, and the result equals that of ``A.float()`` bit for bit, the conversion of a
    value that fp16 holds being exact). ``W`` is float32 for f32 kernels, else the bytes of ``quantize(W, fmt)`` in
    the kernel's weight format. Kernels with 8-bit activations quantize ``A`` first, on its device,
    as llama.cpp's mul_mat does (use :func:`gemm_quantized` to pass quantized activations).
    Kernels with ``fused_quant`` (chapter 6) quantize ``A`` inside, on the GPU, to the same bytes
    (the fp16 step, afmt ``"f16"``, rounds it to fp16 there); a non-finite activation then gives
    non-finite outputs for its token instead of an error (NaN; the fp16 step carries inf as inf).

    ``q8_1_sum`` (Q8_1 kernels): what the activations' ``s`` holds, as in :func:`quantize`;
    default the kernel's ``q8_1_sum`` (the reference quantizer's ``d * sum(q)``). ``"sum_x"`` gives
    ggml-cuda's activation bytes for the same kind of kernel (``quantize_q8_1`` for decode, MMQ's
    ``quantize_mmq_q8_1`` for the tensor-core kernels), so the result matches llama.cpp's CUDA
    mul_mat to rounding; fused kernels offer it where the registry says ``sum_x``.
    """
    k = _kernel(kernel)
    W = _weights(W, k)
    a16 = isinstance(A, torch.Tensor) and A.dtype == torch.float16
    if a16 and k.afmt != "f16":
        raise TypeError(
            f"A must be torch.float32 for kernel {k.name!r}, got torch.float16 (only the fp16 step, the "
            "kernels with afmt 'f16', takes fp16 activations): convert with .float()"
        )
    _check_tensor(A, "A", torch.float16 if a16 else torch.float32)
    if q8_1_sum is not None and q8_1_sum not in _SUM_MODE:
        raise ValueError(f"q8_1_sum must be one of {tuple(_SUM_MODE)}, got {q8_1_sum!r}")
    if q8_1_sum is not None and k.afmt == "f16":
        raise ValueError(f"kernel {k.name!r} rounds float32 A to fp16 itself (no Q8_1): q8_1_sum does not apply")
    if q8_1_sum is not None and k.afmt != "q8_1":
        raise ValueError(f"kernel {k.name!r} takes {k.afmt} activations: q8_1_sum does not apply")
    mode = q8_1_sum or k.q8_1_sum
    if k.afmt == "f32" or k.fused_quant:
        if mode != "d_sum_q" and not k.sum_x:
            raise ValueError(
                f"kernel {k.name!r} quantizes A with the reference quantizer (s = d * sum(q)) "
                "and has no sum_x mode (the registry's sum_x says which kernels have one)"
            )
        _check_pair(A, W, k, "f16" if a16 else "f32")
        _check_sm(A, k)
        return _ops().gemm(A, W, k.name, _SUM_MODE[mode])
    Aq = quantize(A, k.afmt, q8_1_sum=mode)
    return gemm_quantized(Aq, W, k)


def gemm_quantized(Aq: torch.Tensor, W: torch.Tensor, kernel: str) -> torch.Tensor:
    """The GEMM step alone, for kernels with 8-bit activations: ``Aq`` = ``quantize(A, "q8_1")``."""
    k = _kernel(kernel)
    W = _weights(W, k)
    if k.afmt == "f32" or k.fused_quant:
        raise ValueError(f"kernel {k.name!r} takes float32 activations: call gemm(A, W, {k.name!r})")
    _check_pair(Aq, W, k, k.afmt)
    return _ops().gemm(Aq, W, k.name)


# ------------------------------------------------------------------------------ for models
@dataclass(frozen=True)
class QTensor:
    """A quantized weight matrix that knows its format: ``data`` holds the bytes of
    ``quantize(W, fmt)`` (uint8 ``[rows, row_bytes]``), ``shape`` is ``(rows, K)`` of the values.

    Bytes alone do not say what they hold (a Q8_0 row of K=288 and a Q4_0 row of K=544 are both 306
    bytes); a QTensor does, so :func:`gemm` and :func:`linear` can refuse a kernel for another format.
    """

    data: torch.Tensor
    fmt: str

    def __post_init__(self):
        f = _check_fmt(self.fmt)
        _check_tensor(self.data, "QTensor data", torch.uint8)
        f.k_of(self.data.shape[1])  # raises if the row is not whole blocks

    @classmethod
    def quantize(cls, W: torch.Tensor, fmt: str) -> "QTensor":
        """Quantize float32 ``W [rows, K]`` on its device (llama.cpp's reference quantizer's bytes)."""
        return cls(quantize(W, fmt), fmt)

    @property
    def spec(self) -> F.Format:
        return F.SPECS[self.fmt]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.data.shape[0], self.spec.k_of(self.data.shape[1]))

    @property
    def device(self) -> torch.device:
        return self.data.device

    def to(self, device) -> "QTensor":
        return QTensor(self.data.to(device), self.fmt)

    def dequantize(self) -> torch.Tensor:
        return dequantize(self.data, self.fmt)


#: The kernel :func:`linear` picks, by device, weight format and batch size N. On CUDA:
#:   * compute capability 9.0 (Hopper): the decode kernel while N is small, then, Q4_0 and Q8_0, the
#:     fp16 step (12_wgmma_f16.cu) from WGMMA_F16_MIN_N tokens on, the small-batch wgmma step
#:     (11_wgmma_small.cu) between the two where a threshold leaves room (WGMMA_F16_MIN_N's leave
#:     none; chapter 6 passes older ones). With WGMMA_F16_MIN_N None (Q8_1 activations throughout): the small
#:     step to 32 tokens, then the warp-specialised wgmma kernel with split-K (8_wgmma_splitk.cu,
#:     the fourth step as it is when W's 128-row tiles fill the GPU), through its 64-token-tile form
#:     for N <= 64 (9_wgmma_narrow.cu, the fifth step itself past 64). The decode kernel's time grows
#:     with N, the wgmma kernels' hardly does until their tiles fill the GPU.
#:   * 8.x: the same with the mma.sync kernel; older GPUs: chapter 4's vectorised DP4A kernel.
#:   * Q4_1 (chapter 7), Q4_K and Q6_K (chapter 8): the decode kernel, then the mma.sync step on 8.x
#:     and 9.0 (no wgmma kernel), at their own crossovers (DECODE_MAX_N_MMA; Q6_K's is Q4_K's for now).
#: On the CPU: chapter 4's SIMD kernel (f32 weights: chapter 1's blocked kernel; K-quants: chapter 8's).
#: On Hopper, Q4_0 and Q8_0: the decode kernel to N = DECODE_MAX_N_HOPPER[wfmt] (one threshold for
#: rows of K <= 4096 when M leaves most SMs without a 128-row tile of the tensor-core steps, one for
#: other rows of K <= 4096, which the decode kernel packs several to a warp step, one for longer rows),
#: then the small-batch wgmma step (11_wgmma_small.cu: weights as the wgmma's M, tokens as its N)
#: to N = WGMMA_SMALL_MAX_N, then the narrow wgmma step (9_wgmma_narrow.cu) to 64 and the fifth
#: step past it. From the H100 records bench_results/nvidia-h100-80gb-hbm3/2026-11-27/ (cold, calls
#: replayed from a CUDA graph, the three Llama-3-8B shapes): the decode kernel in packed-065600.json
#: (N = 1 to 6), the small step in small-081118.json and small-prefetch-081629.json (N = 1 to 64).
#: Q4_0, rows of 14336: decode 21.2 us at N = 4 against the small step's 22.9, 23.6 at N = 5
#: against about 23; rows of 4096: decode ahead at N = 3 on 4096 x 4096 (10.1 against 10.7), behind
#: from N = 4 (11.2 against 10.7; 14336 x 4096: 24.4 against 20.3). Q8_0, rows of 14336: decode
#: 26.5 at N = 4 against 32.3, 44.9 at N = 5; rows of 4096: decode ahead to N = 5 on 4096 x 4096
#: (12.5 against 13.6), level on 14336 x 4096 (28.6 against 28.7), behind at N = 6 there (32.3
#: against 28.8). The small step against the narrow one: ahead to N = 32 on every shape (Q4_0 4096 x
#: 14336: 29.2 against 35.6), behind from N = 48 (40.8 against 36.0; it keeps only two blocks in
#: flight at 64 tokens). N = 7, 40 and 56 are not measured: between measured N the threshold is a
#: choice. The sweep small-sweep-082729.json (N = 1 to 6, 8 ... 512, the three kernels in one run)
#: prints this choice beside the fastest of ours: the same in 94 of 96 cells, the two others within
#: 3 % (Q4_0 14336 x 4096, N = 3: decode 20.9 against 20.3; Q8_0 4096 x 4096, N = 6: small 13.7
#: against decode 13.5).
#: The thresholds below (the decode kernel against the fifth step, split-K wgmma) are read off the H100 sweep
#: bench_results/nvidia-h100-80gb-hbm3/2026-11-24/sweep-143850.json (cold): with 32 row tiles
#: (M = 4096) the decode kernel is ahead of the split-K kernel to N = 8 (Q4_0 33.8 against 52.1 us at
#: K = 14336, 19.7 against 20.3 at K = 4096) and behind from N = 16; with 112 (M = 14336, K = 4096)
#: to N = 5 (36.8 against 53.5), and level at N = 8 (54.4 against 53.5). Q8_0 likewise.
#: Between the measured N they are a choice, not a measurement. They now serve GPUs that have no
#: wgmma (8.x, against the mma step), where they are not measured.
#: On the CPU, chapter 4's stationary step (weight rows outer, 4 or 8 rows in the lanes of one
#: vector) for the formats that have it, at every N, else the SIMD step. One kernel per format
#: whatever N: a token's outputs then have the same bits in a batch of 1 or of 512 (the model's KV
#: cache is checked against the full pass that way). From the records
#: bench_results/intel-xeon-processor-2t/2026-11-26/results-191410.json (AVX-512 VNNI) and
#: results-200147.json (AVX2 only), 2 threads, M = 4096, K = 14336: the stationary step is ahead of
#: the SIMD step for Q4_0, Q4_1 and Q8_0 at N = 1, 8 and 512 with both builds (Q4_0 VNNI: 1.21
#: against 1.82 ms at N = 1, 227 against 909 at N = 512; Q4_1: 1.87 against 2.59, 309 against 957).
CPU_STATIONARY = ("q4_0", "q8_0", "q4_1")
#: Where the CPU takes chapter 7's one-token kernel (cpu_<w>_q8_1_gemv: the stationary step's bits
#: without its transposes, the next rows prefetched), if its SIMD path compiled (x86 with AVX2;
#: elsewhere the stationary step): N up to CPU_GEMV_MAX_N, and K up to CPU_GEMV_MAX_K[N]. From
#: bench_results/intel-xeon-processor-2t/2026-11-27/results-042643.json (the 2-core CI machine,
#: AVX-512 VNNI, weights cold: copies rotated past the last-level cache; gemv against stationary,
#: median us): N = 1, K <= 4096 ahead in 11 of 12 cells (SmolLM2's Q8_0 output layer 49152 x 576
#: 1724 against 2845; Q8_0 at 4096 x 4096 1045 against 1009 the exception); N = 1 at K = 8192 and
#: 14336 mixed (Q4_1 4096 x 14336 2750 against 2124); N = 2 ahead at K = 576 (Q8_0 1870 against
#: 2945), behind at K = 4096; N = 4 behind.
CPU_GEMV_MAX_N = 2
CPU_GEMV_MAX_K = {1: 4096, 2: 1536}
DECODE_MAX_N_FEW_TILES = 8  # N up to which the decode kernel runs when M/128 < SMs/2
DECODE_MAX_N = 5  # otherwise
#: on Hopper, for the formats with the wgmma steps: (rows of K <= 4096 with M / 128 < SMs / 2, other
#: rows of K <= 4096, longer rows). The first from bench_results/nvidia-h100-80gb-hbm3/2026-11-28/
#: decode-sweep-003235.json (H100, cold, the decode kernel with its activations on their own barrier,
#: the fp16 step and llama.cpp in one run): on 4096 x 4096 the decode kernel is ahead of the fp16 step
#: to N = 4 for Q4_0 (9.94 against 10.73 us; 10.90 against 10.82 at N = 5) and to N = 6 for Q8_0
#: (12.64 against 13.15; 14.82 against 13.14 at N = 8), while 14336 x 4096 keeps the second (Q4_0
#: N = 4 20.77 against 19.07) and 4096 x 14336 the third (Q4_0 N = 4 19.52 against 20.38, N = 5
#: 20.80 against 20.51; Q8_0 N = 4 26.51 against 31.09, N = 5 44.38 against 31.39). The split-K sum
#: with PDL (f16-pdlsum-ab.txt, beside it) took 0.3 to 0.5 us more off the fp16 step on 4096 x 4096
#: at N = 4 to 8 after that run, not enough to move these (Q4_0 N = 4 10.27 / 10.30).
DECODE_MAX_N_HOPPER = {"q4_0": (4, 3, 4), "q8_0": (6, 5, 4)}
#: The same thresholds for a Hopper GPU of this name (torch's device name), where measured apart: on
#: the H200 (HBM3e, 4.3 TB/s copy against the H100's 3.0) the fp16 step overtakes the decode kernel a
#: token sooner for Q8_0's rows of 4096. From bench_results/nvidia-h200/2026-11-29/
#: h200-sweep-q4_0-005951.json and h200-sweep-q8_0-010023.json (cold, the decode kernel and the fp16
#: step with llama.cpp and cuBLAS in one run, N = 1 to 4096, the code of 78dba80): Q8_0 4096 x 4096
#: decode 11.17 against 11.81 us at N = 5, 12.06 against 11.81 at N = 6; 14336 x 4096 19.78 against
#: 22.37 at N = 3, 22.50 against 22.24 at N = 4 (level: the quartiles overlap; the decode kernel
#: keeps N = 4, since the fp16 step starts at WGMMA_F16_MIN_N = 5 and the small step between was not
#: in the run), 25.70 against 22.78 at N = 5; 4096 x 14336 22.69 against 23.62 at N = 4, 41.70
#: against 23.97 at N = 5 (K in two chunks there). Q4_0 as on the H100: 4096 x 4096 9.25 against
#: 9.98 at N = 4, 10.24 against 10.02 at N = 5; 14336 x 4096 16.99 against 17.89 at N = 3, 20.06
#: against 17.95 at N = 4; 4096 x 14336 18.59 against 18.67 at N = 4, 20.45 against 18.85 at N = 5.
#: Then the decode kernel took four rows a step for Q8_0's rows of 4096 from 4 tokens (decode.cuh's
#: launch_pass), and Q8_0's first threshold went back to 6: in h200-sweep-035342.json (beside those,
#: the build that also took them at 3 tokens and for Q4_0; the same code at these cells) 4096 x 4096
#: decode 10.72 against 11.93 us at N = 6, 12.06 against 11.84 at N = 8.
DECODE_MAX_N_BY_GPU = {"NVIDIA H200": {"q4_0": (4, 3, 4), "q8_0": (6, 4, 4)}}
WGMMA_SMALL_MAX_N = 32  #: on Hopper, the small-batch wgmma step from there to here
#: On Hopper, the fp16 step (12_wgmma_f16.cu: weights dequantized to fp16, activations rounded to
#: fp16) from this N on, per format, instead of the small step. Its numbers are not llama.cpp's
#: MMQ's: the activations keep 11 significant bits instead of Q8_1's 8 and a scale per 32 (NMSE
#: against the float product about 7e-8 instead of 3e-5 on Q4_0 4096 x 14336); llama.cpp's cuBLAS
#: path (not taken for Q4_0 and Q8_0 on Hopper) rounds the operands the same way and sums in fp16.
#: None: Q8_1 activations at every N, llama.cpp's MMQ numbers throughout. From the sweep
#: bench_results/nvidia-h100-80gb-hbm3/2026-11-27/crossover-f16-162245.json (H100, cold, the three
#: Llama-3-8B shapes, the decode kernel and both steps in one run at N = 4 to 32), after the fp16
#: step's loop lost a third of its instructions (12_wgmma_f16.cu's header): Q4_0, the fp16 step
#: ahead of the small step from N = 4 on rows of 14336 (N = 5: 20.2 against 22.5 us) and on
#: 14336 x 4096 (19.3 against 20.2), from N = 10 on 4096 x 4096 (10.9 against 11.2; at N = 5 and 6 it
#: trails there, 10.9 against 10.4); Q8_0, ahead from N = 8 on 4096 x 4096 (13.1 against 13.6) and
#: 4096 x 14336 (31.4 against 32.0), within 2 % either way on 14336 x 4096 from N = 4 to 16. One
#: threshold per format: the long rows and wide layers carry most of a model's time. A later run of
#: the same kernels (state-sweep-225108.json, beside it) agreed, and the thresholds moved to where
#: both runs put the wide layers: Q4_0 14336 x 4096 at N = 4, the fp16 step 19.07 against the small
#: step's 20.35 us (the first run 19.42 / 20.26), for 10.75 / 10.72 on 4096 x 4096 (10.82 / 10.35);
#: Q8_0 4096 x 14336 at N = 5 31.25 / 32.14 (31.23 / 31.78), at N = 6 4096 x 4096 13.14 / 13.65
#: (13.28 / 13.34) and 14336 x 4096 28.83 / 28.64 (29.25 / 28.69). The decode kernel keeps the N
#: below (DECODE_MAX_N_HOPPER), so on Hopper the small step now runs only with WGMMA_F16_MIN_N None.
#: Before the change of the fp16 step's loop the H200 sweep bench_results/nvidia-h200/2026-11-27/f16-sweep-103141.json had the small
#: step ahead at N = 5 to 16 (Q4_0 4096 x 14336 N = 8: 21.2 against 23.2): those thresholds (17
#: and 12) are what its tables in chapter 6 show. The H200 sweeps of bench_results/nvidia-h200/2026-11-29/
#: have the decode kernel and the fp16 step only (no small step): they set DECODE_MAX_N_BY_GPU, not these.
WGMMA_F16_MIN_N: dict | None = {"q4_0": 4, "q8_0": 5}
#: The formats whose tensor-core kernel is the mma.sync step (Q4_1, Q4_K, Q6_K: no wgmma kernel), in
#: its split-K launch (10_mma_splitk.cu): the decode kernel to N = 8 (Q4_1) or 16 (Q4_K, Q6_K). From
#: the H100 record bench_results/nvidia-h100-80gb-hbm3/2026-11-27/mma-zfill-003322.json (cold,
#: M = 4096, K = 14336): Q4_1 decode 51.7 against mma_splitk 72.2 us at N = 8, 96.9 against 71.8 at
#: N = 16; Q4_K 70.4 against 76.0 at N = 16, 133.8 against 77.9 at N = 32; Q6_K 82.4 against 106.9
#: at N = 16, 156.8 against 109.1 at N = 32. Between the measured N (Q4_1: 8 and 16; Q4_K, Q6_K: 16
#: and 32) the threshold is a choice; other M, and GPUs other than the H100, are not measured.
DECODE_MAX_N_MMA = {"q4_1": 8, "q4_k": 16, "q6_k": 16}


def pick_kernel(device, wfmt: str, N: int, M: int | None = None, K: int | None = None) -> Kernel:
    """The registered kernel :func:`linear` uses for ``N`` tokens of ``wfmt`` weights on ``device``
    (``M`` output rows and ``K`` the reduction, where the choice depends on them; None: not known)."""
    device = torch.device(device)
    if wfmt == "f32":
        return KERNELS[f"{device.type}_f32_f32_{'blocked' if device.type == 'cpu' else 'tiled'}"]
    _check_fmt(wfmt)
    if device.type == "cpu":  # one token's kernel, the stationary step where faster, the SIMD step, else the last
        short = K is None or K <= CPU_GEMV_MAX_K.get(N, 0)
        if N <= CPU_GEMV_MAX_N and short and f"cpu_{wfmt}_q8_1_gemv" in KERNELS and _cpu_gemv_simd():
            return KERNELS[f"cpu_{wfmt}_q8_1_gemv"]
        if wfmt in CPU_STATIONARY and f"cpu_{wfmt}_q8_1_stationary" in KERNELS:
            return KERNELS[f"cpu_{wfmt}_q8_1_stationary"]
        return _cpu_kernel(wfmt)
    if not any(k.wfmt == wfmt and k.device == device.type for k in KERNELS.values()):
        raise ValueError(f"no {device.type} kernel reads {wfmt} weights yet")
    cc, sms, name = _gpu_info(device)
    return pick_cuda_kernel(wfmt, N, M, cc, sms, K, gpu=name)


@functools.lru_cache(maxsize=None)
def _cpu_gemv_simd() -> bool:
    """Whether this build's one-token CPU kernel has its SIMD path (x86 with AVX2, FMA, F16C)."""
    return bool(_ops().cpu_gemv_simd())


@functools.lru_cache(maxsize=None)
def _cpu_kernel(wfmt: str) -> Kernel:
    cpu = [k for k in KERNELS.values() if k.wfmt == wfmt and k.device == "cpu"]
    if not cpu:
        raise ValueError(f"no cpu kernel reads {wfmt} weights yet")
    return next((k for k in cpu if k.name.endswith("_simd")), cpu[-1])


@functools.lru_cache(maxsize=None)
def _gpu_info(device: torch.device) -> tuple[tuple[int, int], int, str]:
    """(compute capability, SMs, name) of a CUDA device: asked once per device (a model asks per layer)."""
    props = torch.cuda.get_device_properties(device)
    return tuple(torch.cuda.get_device_capability(device)), props.multi_processor_count, props.name


def pick_cuda_kernel(
    wfmt: str,
    N: int,
    M: int | None,
    cc: tuple[int, int],
    sms: int,
    K: int | None = None,
    q8_1_only: bool = False,
    f16_min_n: dict | None = None,
    decode_max_n: dict | None = None,
    gpu: str | None = None,
) -> Kernel:
    """:func:`pick_kernel`'s choice on a GPU of compute capability ``cc`` with ``sms`` SMs (no GPU
    needed: :func:`choice_table` prints it for any GPU). ``K`` None: taken as a short row (K <= 4096).
    ``q8_1_only``: the choice among the kernels with Q8_1 activations (llama.cpp's MMQ numbers), as
    with ``WGMMA_F16_MIN_N = None``. ``f16_min_n``: thresholds of the fp16 step to use instead of
    ``WGMMA_F16_MIN_N`` (a record made with other ones: chapter 6); ``decode_max_n`` likewise for
    ``DECODE_MAX_N_HOPPER``. ``gpu``: the device's name, whose own decode thresholds
    (``DECODE_MAX_N_BY_GPU``) replace ``DECODE_MAX_N_HOPPER`` where it has them."""
    few_tiles = M is not None and (M + 127) // 128 < sms // 2
    small = N <= (DECODE_MAX_N_FEW_TILES if few_tiles else DECODE_MAX_N)
    if wfmt in DECODE_MAX_N_MMA:
        small = N <= DECODE_MAX_N_MMA[wfmt]
    elif cc == (9, 0) and f"cuda_{wfmt}_q8_1_wgmma_narrow" in KERNELS:
        limits = (decode_max_n or DECODE_MAX_N_BY_GPU.get(gpu) or DECODE_MAX_N_HOPPER).get(wfmt)
        if not (isinstance(limits, tuple) and len(limits) == 3 and all(isinstance(n, int) for n in limits)):
            raise ValueError(
                f"decode thresholds for {wfmt}: expected (few-tile short rows, short rows, long rows) as three "
                f"integers, got {limits!r}"
            )
        few_tiles_rows, short_rows, long_rows = limits
        short = few_tiles_rows if few_tiles else short_rows
        small = N <= (long_rows if K is not None and K > 4096 else short)
    if cc >= (8, 0) and small:
        names = [f"cuda_{wfmt}_q8_1_decode"]
    elif cc == (9, 0):
        f16_from = None if q8_1_only else (f16_min_n or WGMMA_F16_MIN_N or {}).get(wfmt)
        names = [f"cuda_{wfmt}_f16_wgmma"] if f16_from is not None and N >= f16_from else []
        names += [f"cuda_{wfmt}_q8_1_wgmma_small"] if N <= WGMMA_SMALL_MAX_N else []
        names += [f"cuda_{wfmt}_q8_1_wgmma_{s}" for s in ("narrow", "splitk")]
        names += [f"cuda_{wfmt}_q8_1_mma_splitk", f"cuda_{wfmt}_q8_1_mma"]
    elif cc >= (8, 0):
        # The mma steps stage 172 to 201 KB of shared memory per CTA: more than Ampere and Ada allow
        # (A100: 163 KB, sm_86 and sm_89: 99 KB; their launcher says so). Those GPUs keep the decode
        # kernel at every N (not measured there).
        names = []
    else:
        names = [f"cuda_{wfmt}_q8_1_vec_dp4a"]
    # Q4_1, Q4_K and Q6_K have the mma step (chapters 7 and 8) but no wgmma kernel: on Hopper too
    # they take the mma step (its split-K launch, 10_mma_splitk.cu) past their own thresholds
    # (DECODE_MAX_N_MMA).
    # A format without a tensor-core kernel keeps the decode kernel at every N: it takes any N, in
    # passes of up to 8 tokens.
    names += [f"cuda_{wfmt}_q8_1_decode"] if cc >= (8, 0) else []
    for name in names:
        if name in KERNELS and KERNELS[name].runs_on(cc):
            return KERNELS[name]
    raise ValueError(f"no CUDA kernel for {wfmt} weights on compute capability {cc[0]}.{cc[1]}")


#: Batch sizes of :func:`choice_table`: decode, speculative decoding and small batches, prefill.
CHOICE_NS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048)


def choice_table(
    cc: tuple[int, int],
    sms: int,
    formats=None,
    shapes=((4096, 4096), (14336, 4096), (4096, 14336)),
    ns=CHOICE_NS,
    gpu: str | None = None,
) -> str:
    """The kernel :func:`linear` picks on a GPU of compute capability ``cc`` with ``sms`` SMs (and the
    name ``gpu``, where the choice depends on it), for each weight format (those with CUDA kernels),
    layer shape (M, K) and batch size N, as a text table."""
    formats = formats or [f for f in F.SPECS if any(k.device == "cuda" and k.wfmt == f for k in KERNELS.values())]
    lines = [
        f"kernel picked on {gpu + ', ' if gpu else ''}compute capability {cc[0]}.{cc[1]}, {sms} SMs (api.pick_kernel)"
    ]
    lines.append(f"{'format':7s} {'M':>6s} {'K':>6s}  " + " ".join(f"{'N=' + str(n):>12s}" for n in ns))
    for wfmt in formats:
        for M, K in shapes:
            cells = []
            for n in ns:
                try:
                    name = pick_cuda_kernel(wfmt, n, M, cc, sms, K, gpu=gpu).name
                    cells.append(name.replace(f"cuda_{wfmt}_q8_1_", "").replace(f"cuda_{wfmt}_", ""))
                except ValueError:
                    cells.append("-")
            lines.append(f"{wfmt:7s} {M:6d} {K:6d}  " + " ".join(f"{c:>12s}" for c in cells))
    return "\n".join(lines)


def linear(x: torch.Tensor, W, kernel: str | None = None) -> torch.Tensor:
    """``y = x @ W^T`` as a model's linear layer computes it, with W a :class:`QTensor` (or float32).

    ``x`` is ``[..., K]``, float32, float16 or bfloat16; ``y`` is float32 ``[..., M]``. The kernel
    is :func:`pick_kernel`'s choice for ``x``'s device, W's format and the number of tokens, unless
    ``kernel`` names one. float16 ``x`` goes to the fp16 step (afmt ``"f16"``) as it is, with no
    conversion pass; every other kernel gets ``x`` as float32 (exact: float16 and bfloat16 values are
    float32 values), so the result is that of ``linear(x.float(), W)``.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension, its last being K")
    wfmt = W.fmt if isinstance(W, QTensor) else "f32"
    rows, K = W.shape if isinstance(W, QTensor) else (W.shape[0], W.shape[-1])
    if x.shape[-1] != K:
        raise ValueError(f"x has K={x.shape[-1]} in its last dimension, W [M, K] has K={K}")
    lead = x.shape[:-1]
    A = x.reshape(-1, K).contiguous()
    k = _kernel(kernel) if kernel is not None else pick_kernel(A.device, wfmt, A.shape[0], rows, A.shape[1])
    if k.wfmt != wfmt:
        raise ValueError(f"kernel {k.name!r} reads {k.wfmt} weights, W holds {wfmt}")
    if A.dtype != torch.float32 and not (A.dtype == torch.float16 and k.afmt == "f16"):
        A = A.float()
    if k.device == "cpu" and k.afmt != "f32" and A.device.type == "cpu" and W.device.type == "cpu":
        # What gemm() would check again is settled here: A is float32 [N, K], contiguous, on the CPU;
        # W a QTensor (its bytes checked when it was made) of the kernel's format with the same K.
        # The activations still get quantize()'s finite check and overflow warnings, and the binding
        # checks shapes before the kernel runs. A model makes 121 such calls per token: gemm()'s
        # second round of checks cost about 10 us each (576 x 576 Q4_1, one token, 2 threads).
        # Not on CUDA: its kernels also need W's bytes on a 16-byte boundary, which a QTensor (a view
        # can be one) does not promise, so there gemm() checks the pair.
        Aq = quantize(A, k.afmt, q8_1_sum=k.q8_1_sum)
        return _ops().gemm(Aq, W.data, k.name).reshape(*lead, rows)
    return gemm(A, W, k).reshape(*lead, rows)
