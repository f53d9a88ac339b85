"""Reference GEMMs in numpy (float64 accumulation): what every kernel must compute.

Convention (the whole course): ``W [M, K]`` weights, ``A [N, K]`` activations, ``C [N, M] = A @ W.T``.

* ``f32 x f32``    : C = A @ W^T.
* ``q4_0/q8_0 x f32`` (W4A16, W8A16): C = A @ dequantize(W)^T, weights dequantized exactly.
* ``q4_0/q8_0 x f16`` (chapter 6's fp16 tensor-core step): C = fp16(A) @ fp16(dequantize(W))^T.
* ``q4_0 x q8_1`` (W4A8): per block of 32, integer dot product of the raw quants, then scales.
  With q_w the raw Q4_0 nibble (0..15) and the true weight (q_w - 8) * d_w::

      sum_j (q_w,j - 8) d_w * q_a,j d_a  =  d_w * (d_a * sum_j q_w,j q_a,j  -  8 * d_a * sum_j q_a,j)
                                         =  d_w * (d_a * sumi  -  8 * s_a)

  where ``s_a = d_a * sum(q_a)`` is what a Q8_1 block stores (llama.cpp's CPU reference), so the
  kernel never subtracts 8 from a nibble. If the block stores ``s_a = sum(x)`` instead (ggml-cuda),
  the same formula uses the unquantized sum: a slightly different number. Chapter 4 derives this.
* ``q8_0 x q8_1`` (W8A8): d_w * d_a * sumi; ``s`` is not needed.
* ``q4_1 x q8_1`` (chapter 7): the weight is ``q * d_w + m_w``, so a block is
  ``d_w * d_a * sumi + m_w * s_a``: the min enters through the activations' ``s``.

* ``q4_k/q6_k x q8_1`` (chapter 8's CUDA kernels, ggml-cuda's MMVQ pairing): the same per sub-block,
  with a d_a per 32 values and Q4_K's min times the integer sum of the activation quants
  (``gemm_wk_aq8_1``); Q8_1's ``s`` is not read.
* ``q4_k/q6_k x q8_k`` (chapter 8, ggml's CPU pairing for K-quants): per super-block of 256, integer
  dots per sub-block times the sub-block's integer scale, then the float scales once::

      Q4_K:  d_w d_a * sum_s sc_s * sum_{j in s} q_w,j q_a,j  -  dmin_w d_a * sum_s m_s * bsum_a,s
      Q6_K:  d_w d_a * sum_t sc_t * sum_{j in t} (q_w,j - 32) q_a,j

  with ``bsum_a,s`` the sum of the activation quants of sub-block s (Q8_K's ``bsums``, two per
  sub-block of 32). Exact in integers up to the float scales, as ``ggml_vec_dot_q4_K_q8_K``.

Scales are read from the fp16 fields exactly as kernels read them, so a kernel may differ from
the reference only by float32 rounding of its additions.
"""

from __future__ import annotations

import numpy as np

from . import formats as F


def nmse(result, reference) -> float:
    """Normalized mean squared error, llama.cpp's metric: sum((a-b)^2) / sum(a^2).

    We normalize by the reference ``a``. llama.cpp's test-backend-ops normalizes by the output of
    the backend under test (its CPU backend is the other operand); the two differ by a factor
    1 + O(sqrt(NMSE)), which changes no threshold.

    Returns ``inf`` when the outputs disagree on NaN or on the position/sign of infinities, as
    test-backend-ops fails such outputs before it computes an error.
    """
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(result, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {b.shape} vs reference {a.shape}")
    if np.isnan(a).any() or np.isnan(b).any():
        return float("inf")
    if not np.array_equal(np.isinf(a), np.isinf(b)) or not np.array_equal(a[np.isinf(a)], b[np.isinf(b)]):
        return float("inf")
    fin = np.isfinite(a)
    num = float(((a[fin] - b[fin]) ** 2).sum())
    den = float((a[fin] ** 2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def gemm_f32(A: np.ndarray, W: np.ndarray) -> np.ndarray:
    """C = A @ W^T in float64."""
    return np.asarray(A, np.float64) @ np.asarray(W, np.float64).T


def gemm_wq_af32(A: np.ndarray, Wq: np.ndarray, wfmt: str) -> np.ndarray:
    """W4A16 / W8A16: float activations times dequantized weights."""
    return gemm_f32(A, F.dequantize(Wq, wfmt))


def gemm_wq_af16(A: np.ndarray, Wq: np.ndarray, wfmt: str) -> np.ndarray:
    """fp16 tensor cores on quantized weights (chapter 6's fp16 step): the activations rounded to
    fp16, each weight d (q - offset) rounded once to fp16 (as llama.cpp's cuBLAS path rounds them,
    which then sums in fp16), the products summed here in float64. Values past fp16's range become
    inf, as on the GPU."""
    with np.errstate(over="ignore"):
        A16 = np.asarray(A, np.float32).astype(np.float16)
        W16 = F.dequantize(Wq, wfmt).astype(np.float16)
    return gemm_f32(A16, W16)


def gemm_wq_aq8_1(Aq: np.ndarray, Wq: np.ndarray, wfmt: str, q4_0_formula: str = "compensated") -> np.ndarray:
    """W4A8 / W8A8 on already quantized activations (Q8_1 bytes), block by block in integers.

    Where the 8 of a Q4_0 nibble is removed is a choice; llama.cpp makes it per path, and the
    kernels of this course use both formulas:

    * ``"compensated"`` (ggml-cuda's DP4A paths: MMVQ, and MMQ where there are no integer tensor
      cores; chapter 4): the integer dot runs on the stored nibbles 0..15 and the -8 comes back as
      ``-8 * s_a``, with ``s_a`` as stored in the Q8_1 block (rounded to fp16):
      ``d_w * (d_a * sum(q * a) - 8 * s_a)``.
    * ``"signed"`` (ggml-cuda's MMQ on integer tensor cores, chapter 6's mma kernels): the nibbles
      become ``q - 8`` before the integer dot: ``d_w * d_a * sum((q - 8) * a)``, exact, no ``s_a``.
      ggml-cpu computes this too, but with Q8_0 activations (no ``s`` at all): it subtracts 8 from
      each nibble in integers (``ggml_vec_dot_q4_0_q8_0``).

    They differ by ``8 * d_w * (s_a - d_a * sum(a))`` per block: the fp16 rounding of ``s_a``.
    With the course's default Q8_1 (``s = d * sum(q)``, llama.cpp's reference quantizer) the
    compensated form is the course's own clean reference; matching ggml-cuda's MMVQ needs its
    ``s = sum(x)`` (``q8_1_sum="sum_x"``).
    """
    if q4_0_formula not in ("compensated", "signed"):
        raise ValueError(f"q4_0_formula must be 'compensated' or 'signed', got {q4_0_formula!r}")
    if wfmt in ("q4_k", "q6_k"):
        return gemm_wk_aq8_1(Aq, Wq, wfmt)
    wb, ab = F.as_blocks(Wq, wfmt), F.as_blocks(Aq, "q8_1")
    if wb.shape[1] != ab.shape[1]:
        raise ValueError(f"W has {wb.shape[1]} blocks per row, A has {ab.shape[1]}")
    M, nb = wb.shape
    N = ab.shape[0]
    qw = F.unpack_quants(Wq, wfmt).reshape(M, nb, F.QK).astype(np.int64)
    qa = F.unpack_quants(Aq, "q8_1").reshape(N, nb, F.QK).astype(np.int64)
    dw = wb["d"].astype(np.float64)[None, :, :]
    da = ab["d"].astype(np.float64)[:, None, :]
    if wfmt == "q4_0" and q4_0_formula == "compensated":
        sumi = np.einsum("nbj,mbj->nmb", qa, qw)  # integer dot product per block: [N, M, nb]
        sa = ab["s"].astype(np.float64)[:, None, :]
        per_block = dw * (da * sumi - 8.0 * sa)  # the compensation: -8 folded into s_a
    elif wfmt == "q4_0":
        sumi = np.einsum("nbj,mbj->nmb", qa, qw - 8)  # signed nibbles: the exact integer dot
        per_block = dw * da * sumi
    elif wfmt == "q8_0":
        sumi = np.einsum("nbj,mbj->nmb", qa, qw)
        per_block = dw * da * sumi
    elif wfmt == "q4_1":  # value = q * d_w + m_w: the min comes back through s_a, as stored
        sumi = np.einsum("nbj,mbj->nmb", qa, qw)
        mw = wb["m"].astype(np.float64)[None, :, :]
        sa = ab["s"].astype(np.float64)[:, None, :]
        per_block = dw * da * sumi + mw * sa
    else:
        raise ValueError(f"no W x Q8_1 reference for weights {wfmt!r}")
    return per_block.sum(axis=2)


def gemm_wk_aq8_1(Aq: np.ndarray, Wq: np.ndarray, wfmt: str) -> np.ndarray:
    """K-quant weights (Q4_K, Q6_K) times Q8_1 activations (chapter 8's CUDA kernels, ggml-cuda's
    MMVQ pairing): every 32-value Q8_1 block has its own d_a. Per sub-block, an integer dot times
    the sub-block's integer scale and d_a; Q4_K's min term takes the integer sum of the activation
    quants (as vec_dot_q4_K_q8_1 does, with a __dp4a on 0x01010101), not the block's ``s``::

        Q4_K:  sum_b d_a,b (d_w sc_b sum_{j in b} q_w,j q_a,j  -  dmin_w m_b sum_{j in b} q_a,j)
        Q6_K:  d_w sum_t d_a,b(t) sc_t sum_{j in t} (q_w,j - 32) q_a,j       (b(t) = t // 2)
    """
    if wfmt not in ("q4_k", "q6_k"):
        raise ValueError(f"no K-quant W x Q8_1 reference for weights {wfmt!r}")
    wb, ab = F.as_blocks(Wq, wfmt), F.as_blocks(Aq, "q8_1")
    M, nb = wb.shape
    N = ab.shape[0]
    if ab.shape[1] != nb * 8:
        raise ValueError(f"W has {nb} super-blocks per row ({nb * 8} blocks of 32), A has {ab.shape[1]} blocks")
    qa = F.unpack_quants(Aq, "q8_1").reshape(N, nb, 8, 32).astype(np.int64)
    qw = F.unpack_quants(Wq, wfmt).reshape(M, nb, F.QK_K).astype(np.int64) - F.SPECS[wfmt].offset
    da = ab["d"].astype(np.float64).reshape(N, nb, 8)
    dw = wb["d"].astype(np.float64)[None, :, :]
    if wfmt == "q4_k":
        sc, m = (v.astype(np.int64) for v in F.q4_k_scale_min(wb["scales"]))  # [M, nb, 8]
        dots = np.einsum("nbsj,mbsj->nmbs", qa, qw.reshape(M, nb, 8, 32))
        asum = qa.sum(axis=3)  # [N, nb, 8]
        per_block = dw * (da[:, None] * dots * sc[None]).sum(axis=3)
        per_block -= wb["dmin"].astype(np.float64)[None] * np.einsum("nbs,mbs->nmb", da * asum, m)
    else:
        sc = wb["scales"].astype(np.int64)  # [M, nb, 16]
        dots = np.einsum("nbtj,mbtj->nmbt", qa.reshape(N, nb, 16, 16), qw.reshape(M, nb, 16, 16))
        per_block = dw * (np.repeat(da, 2, axis=2)[:, None] * dots * sc[None]).sum(axis=3)
    return per_block.sum(axis=2)


def gemm_wk_aq8_k(Aq: np.ndarray, Wq: np.ndarray, wfmt: str) -> np.ndarray:
    """K-quant weights (Q4_K, Q6_K) times Q8_K activations, super-block by super-block (the
    formulas in the module docstring; float64 except the stored scales)."""
    if wfmt not in ("q4_k", "q6_k"):
        raise ValueError(f"no W x Q8_K reference for weights {wfmt!r}")
    wb, ab = F.as_blocks(Wq, wfmt), F.as_blocks(Aq, "q8_k")
    if wb.shape[1] != ab.shape[1]:
        raise ValueError(f"W has {wb.shape[1]} super-blocks per row, A has {ab.shape[1]}")
    M, nb = wb.shape
    N = ab.shape[0]
    qa = F.unpack_quants(Aq, "q8_k").reshape(N, nb, F.QK_K).astype(np.int64)
    qw = F.unpack_quants(Wq, wfmt).reshape(M, nb, F.QK_K).astype(np.int64) - F.SPECS[wfmt].offset
    dw = wb["d"].astype(np.float64)[None, :, :]
    da = ab["d"].astype(np.float64)[:, None, :]
    if wfmt == "q4_k":
        sc, m = (v.astype(np.int64) for v in F.q4_k_scale_min(wb["scales"]))  # [M, nb, 8]
        dots = np.einsum("nbsj,mbsj->nmbs", qa.reshape(N, nb, 8, 32), qw.reshape(M, nb, 8, 32))
        sumi = (dots * sc[None]).sum(axis=3)  # [N, M, nb]
        bsum = ab["bsums"].astype(np.int64).reshape(N, nb, 8, 2).sum(axis=3)  # per sub-block of 32
        summ = np.einsum("nbs,mbs->nmb", bsum, m)
        per_block = dw * da * sumi - wb["dmin"].astype(np.float64)[None, :, :] * da * summ
    else:
        sc = wb["scales"].astype(np.int64)  # [M, nb, 16]
        dots = np.einsum("nbtj,mbtj->nmbt", qa.reshape(N, nb, 16, 16), qw.reshape(M, nb, 16, 16))
        per_block = dw * da * (dots * sc[None]).sum(axis=3)
    return per_block.sum(axis=2)


def gemm(
    A: np.ndarray, W: np.ndarray, wfmt: str, afmt: str, q8_1_sum: str = "d_sum_q", q4_0_formula: str = "compensated"
) -> np.ndarray:
    """The reference for a kernel with weight format ``wfmt`` and activation format ``afmt``.

    ``A`` is float32 ``[N, K]``; ``W`` is float32 ``[M, K]`` (``wfmt="f32"``) or quantized bytes.
    For ``afmt="q8_1"`` or ``"q8_k"`` the activations are quantized here with the reference quantizer, as the
    kernels' ``gemm()`` quantizes them on their device; ``q4_0_formula`` as in ``gemm_wq_aq8_1``.
    """
    if wfmt == "f32" and afmt == "f32":
        return gemm_f32(A, W)
    if afmt == "f32":
        return gemm_wq_af32(A, W, wfmt)
    if afmt == "f16":
        return gemm_wq_af16(A, W, wfmt)
    if afmt == "q8_1":
        return gemm_wq_aq8_1(F.quantize_q8_1(np.asarray(A, np.float32), q8_1_sum), W, wfmt, q4_0_formula)
    if afmt == "q8_k":
        return gemm_wk_aq8_k(F.quantize_q8_k(np.asarray(A, np.float32)), W, wfmt)
    raise ValueError(f"no reference for weights {wfmt!r} x activations {afmt!r}")
