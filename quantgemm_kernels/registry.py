"""KERNELS: every GEMM kernel of the course, in teaching order. Tests, benchmarks and notebooks
iterate this table; nothing else lists kernels.

A name reads ``<device>_<weight format>_<activation format>_<variant>``; the C++ side lists the
same names in ``csrc/cpu/kernels.def`` and ``csrc/cuda/kernels.def`` (a test checks they agree).
A kernel's ``file`` is its step file, relative to ``csrc/<device>/``: one folder per chapter,
named ``<chapter>_<topic>`` (``04_w4a8``), and in it one file per step of the chapter's ladder,
numbered in teaching order (``04_w4a8/3_dp4a.cu``), so that ``ls`` reads as the chapter does. A step
file holds one idea and defines it for every weight format that takes it: ``04_w4a8/3_dp4a.cu``
defines ``cuda_q4_0_q8_1_dp4a`` and ``cuda_q8_0_q8_1_dp4a``. Headers that one chapter's steps
share sit in that chapter's folder; those of several chapters (``cuda/common.cuh``,
``cuda/w_q8_1.cuh``) one level up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"


@dataclass(frozen=True)
class Kernel:
    name: str
    device: str  #: "cpu" or "cuda"
    wfmt: str  #: weight format: "f32", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k"
    #: activation format the kernel consumes: "f32", "q8_1" or "q8_k" (gemm() quantizes A), or "f16"
    #: (float32 A rounded to fp16 by the kernel itself: chapter 6's fp16 step, fused_quant)
    afmt: str
    chapter: int
    title: str  #: the technique, in a few words
    #: the step file that defines the kernel, relative to ``csrc/<device>/`` (``"04_w4a8/3_dp4a.cu"``)
    file: str = ""
    q8_1_sum: str = "d_sum_q"  #: meaning of Q8_1's s when gemm() quantizes A for this kernel
    #: Q4_0 x Q8_1 formula (reference.gemm_wq_aq8_1): "compensated" (-8 * s_a, llama.cpp's MMVQ)
    #: or "signed" (nibbles made q - 8 before the integer dot, llama.cpp's MMQ on tensor cores)
    q4_0_formula: str = "compensated"
    #: True: the kernel takes float32 A and quantizes it to Q8_1 (afmt "f16": rounds it to fp16)
    #: itself, on the GPU, with no host round trip (chapter 6; llama.cpp's mul_mat does the same). A
    #: non-finite activation block then makes every output it touches NaN (the fp16 step: inf or NaN)
    #: instead of raising.
    fused_quant: bool = False
    #: fused_quant kernels only: True where the kernel can quantize A as llama.cpp's CUDA backend
    #: does for the same kind of kernel (``gemm(..., q8_1_sum="sum_x")``): the decode kernels as
    #: ``quantize_q8_1`` (s = sum(x), which MMVQ reads), the tensor-core kernels as MMQ's
    #: ``quantize_mmq_q8_1`` (x * 127/amax; d kept in float32 for Q8_0 weights). Their output then
    #: matches llama.cpp's mul_mat on the same bytes to float rounding. Default: the reference's bytes.
    #: Not offered by decode_fused (a ladder step) and the Q8_0 mma step, whose magic-number
    #: conversion is exact only for a d_a of at most 22 significant bits (MMQ keeps a float32 d there).
    sum_x: bool = False
    min_sm: tuple = (0, 0)  #: oldest CUDA compute capability the kernel runs on
    #: newest one: (9, 0) for code built for sm_90a (wgmma), which runs on compute capability 9.0 only
    max_sm: tuple = (99, 99)

    def runs_on(self, capability: tuple) -> bool:
        """Whether this CUDA kernel runs on a GPU of compute ``capability`` (major, minor)."""
        return tuple(self.min_sm) <= tuple(capability) <= tuple(self.max_sm)

    @property
    def source(self) -> Path:
        """The one file that holds this kernel's idea: ``csrc/<device>/<file>``."""
        return CSRC / self.device / self.file


_CPU = [
    Kernel("cpu_f32_f32_naive", "cpu", "f32", "f32", 1, "one dot product per output", file="01_fp32/1_naive.cpp"),
    Kernel(
        "cpu_f32_f32_blocked",
        "cpu",
        "f32",
        "f32",
        1,
        "2x4 register tile, SIMD-lane accumulators",
        file="01_fp32/2_blocked.cpp",
    ),
    Kernel(
        "cpu_q4_0_f32_naive",
        "cpu",
        "q4_0",
        "f32",
        3,
        "dequantize each weight inside the dot product",
        file="03_w4a16/1_naive.cpp",
    ),
    Kernel(
        "cpu_q4_0_f32_blocked",
        "cpu",
        "q4_0",
        "f32",
        3,
        "dequantize a block once, reuse it over a 4x4 tile",
        file="03_w4a16/2_blocked.cpp",
    ),
    Kernel(
        "cpu_q4_0_q8_1_naive",
        "cpu",
        "q4_0",
        "q8_1",
        4,
        "integer dot per block, then the compensation",
        file="04_w4a8/1_naive.cpp",
    ),
    Kernel(
        "cpu_q4_0_q8_1_blocked",
        "cpu",
        "q4_0",
        "q8_1",
        4,
        "unpack nibbles once per 4x4 tile",
        file="04_w4a8/2_blocked.cpp",
    ),
    Kernel(
        "cpu_q4_0_q8_1_simd",
        "cpu",
        "q4_0",
        "q8_1",
        4,
        "int8 SIMD dot products (VNNI/AVX2), the CPU's DP4A",
        file="04_w4a8/3_simd.cpp",
    ),
    Kernel(
        "cpu_q4_0_q8_1_stationary",
        "cpu",
        "q4_0",
        "q8_1",
        4,
        "weights stay in cache, tokens stream past (tinyBLAS's order)",
        file="04_w4a8/4_stationary.cpp",
    ),
    Kernel(
        "cpu_q8_0_q8_1_naive",
        "cpu",
        "q8_0",
        "q8_1",
        4,
        "integer dot per block, no compensation",
        file="04_w4a8/1_naive.cpp",
    ),
    Kernel(
        "cpu_q8_0_q8_1_blocked",
        "cpu",
        "q8_0",
        "q8_1",
        4,
        "weights read once per 4x4 tile",
        file="04_w4a8/2_blocked.cpp",
    ),
    Kernel(
        "cpu_q8_0_q8_1_simd",
        "cpu",
        "q8_0",
        "q8_1",
        4,
        "int8 SIMD dot products with the sign trick",
        file="04_w4a8/3_simd.cpp",
    ),
    Kernel(
        "cpu_q8_0_q8_1_stationary",
        "cpu",
        "q8_0",
        "q8_1",
        4,
        "weights stay in cache; VNNI without the sign trick",
        file="04_w4a8/4_stationary.cpp",
    ),
    # chapter 7: Q4_1 weights (a real model's format) through chapter 4's steps
    Kernel(
        "cpu_q4_1_q8_1_naive",
        "cpu",
        "q4_1",
        "q8_1",
        7,
        "integer dot per block, then d_w d_a sumi + m_w s_a",
        file="04_w4a8/1_naive.cpp",
    ),
    Kernel(
        "cpu_q4_1_q8_1_blocked",
        "cpu",
        "q4_1",
        "q8_1",
        7,
        "unpack nibbles once per 4x4 tile, d and m per block",
        file="04_w4a8/2_blocked.cpp",
    ),
    Kernel(
        "cpu_q4_1_q8_1_simd",
        "cpu",
        "q4_1",
        "q8_1",
        7,
        "int8 SIMD dot products, the min summed beside them",
        file="04_w4a8/3_simd.cpp",
    ),
    Kernel(
        "cpu_q4_1_q8_1_stationary",
        "cpu",
        "q4_1",
        "q8_1",
        7,
        "weights stay in cache, the rows' mins in one vector",
        file="04_w4a8/4_stationary.cpp",
    ),
    # chapter 7: one token (a decode step): the stationary step's arithmetic without its transposes
    Kernel(
        "cpu_q4_0_q8_1_gemv",
        "cpu",
        "q4_0",
        "q8_1",
        7,
        "one token: each row's block against the token's, rows summed into lanes",
        file="07_model/1_gemv.cpp",
    ),
    Kernel(
        "cpu_q8_0_q8_1_gemv",
        "cpu",
        "q8_0",
        "q8_1",
        7,
        "one token: each row's block against the token's, rows summed into lanes",
        file="07_model/1_gemv.cpp",
    ),
    Kernel(
        "cpu_q4_1_q8_1_gemv",
        "cpu",
        "q4_1",
        "q8_1",
        7,
        "one token: each row's block against the token's, rows summed into lanes",
        file="07_model/1_gemv.cpp",
    ),
    # chapter 8: K-quant weights (super-blocks of 256) times Q8_K activations, ggml's CPU pairing
    Kernel(
        "cpu_q4_k_q8_k_naive",
        "cpu",
        "q4_k",
        "q8_k",
        8,
        "integer dot per sub-block times its 6-bit scale; the min from Q8_K's bsums",
        file="08_k_quants/1_naive.cpp",
    ),
    Kernel(
        "cpu_q6_k_q8_k_naive",
        "cpu",
        "q6_k",
        "q8_k",
        8,
        "integer dot per 16 values times its int8 scale, d_w d_a once per 256",
        file="08_k_quants/1_naive.cpp",
    ),
    Kernel(
        "cpu_q4_k_q8_k_simd",
        "cpu",
        "q4_k",
        "q8_k",
        8,
        "int8 SIMD dots, the sub-block scale riding in vpmaddwd, 4x4 tiles",
        file="08_k_quants/2_simd.cpp",
    ),
    Kernel(
        "cpu_q6_k_q8_k_simd",
        "cpu",
        "q6_k",
        "q8_k",
        8,
        "int8 SIMD dots on the unsigned 6-bit quants, the -32 returned through Q8_K's bsums",
        file="08_k_quants/2_simd.cpp",
    ),
]

_CUDA = [
    Kernel("cuda_f32_f32_naive", "cuda", "f32", "f32", 1, "one thread per output", file="01_fp32/1_naive.cu"),
    Kernel("cuda_f32_f32_tiled", "cuda", "f32", "f32", 1, "shared-memory tiles", file="01_fp32/2_tiled.cu"),
    Kernel(
        "cuda_q4_0_f32_naive",
        "cuda",
        "q4_0",
        "f32",
        3,
        "one thread per output, dequantize on the fly",
        file="03_w4a16/1_naive.cu",
    ),
    Kernel(
        "cuda_q4_0_f32_tiled",
        "cuda",
        "q4_0",
        "f32",
        3,
        "dequantize W tiles into shared memory",
        file="03_w4a16/2_tiled.cu",
    ),
    Kernel(
        "cuda_q4_0_f32_decode",
        "cuda",
        "q4_0",
        "f32",
        3,
        "decode GEMV: 4 lanes per block, warp-shuffle sum",
        file="03_w4a16/3_decode.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_naive",
        "cuda",
        "q4_0",
        "q8_1",
        4,
        "integer dot per block, then the compensation",
        file="04_w4a8/1_naive.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_tiled", "cuda", "q4_0", "q8_1", 4, "shared-memory tiles of blocks", file="04_w4a8/2_tiled.cu"
    ),
    Kernel(
        "cuda_q4_0_q8_1_dp4a",
        "cuda",
        "q4_0",
        "q8_1",
        4,
        "__dp4a: four int8 products per instruction",
        file="04_w4a8/3_dp4a.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_tiled_dp4a",
        "cuda",
        "q4_0",
        "q8_1",
        4,
        "shared-memory tiles + __dp4a",
        file="04_w4a8/4_tiled_dp4a.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_vec_dp4a",
        "cuda",
        "q4_0",
        "q8_1",
        4,
        "tiles + __dp4a + 32/128-bit loads, 4 blocks per step",
        file="04_w4a8/5_vec_dp4a.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_naive",
        "cuda",
        "q8_0",
        "q8_1",
        4,
        "integer dot per block, no compensation",
        file="04_w4a8/1_naive.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_tiled", "cuda", "q8_0", "q8_1", 4, "shared-memory tiles of blocks", file="04_w4a8/2_tiled.cu"
    ),
    Kernel(
        "cuda_q8_0_q8_1_dp4a", "cuda", "q8_0", "q8_1", 4, "__dp4a on the stored int8 words", file="04_w4a8/3_dp4a.cu"
    ),
    Kernel(
        "cuda_q8_0_q8_1_tiled_dp4a",
        "cuda",
        "q8_0",
        "q8_1",
        4,
        "shared-memory tiles + __dp4a",
        file="04_w4a8/4_tiled_dp4a.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_vec_dp4a",
        "cuda",
        "q8_0",
        "q8_1",
        4,
        "tiles + __dp4a + 32/128-bit loads, 4 blocks per step",
        file="04_w4a8/5_vec_dp4a.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_decode_fused",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "decode: 16-byte weight loads, every CTA quantizes the activations",
        fused_quant=True,
        min_sm=(8, 0),
        file="06_decode_tensor_cores/1_decode_fused.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_decode",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "decode: activations quantized once, copied by every CTA (PDL)",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/2_decode.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_mma_regstage",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "int8 tensor cores (mma.sync m16n8k32), 128x128 tiles, weights staged in registers",
        fused_quant=True,
        min_sm=(8, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/3_mma_regstage.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_mma",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "int8 tensor cores, 128x128 tiles, weights unpacked once per CTA, ldmatrix",
        fused_quant=True,
        min_sm=(8, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/4_mma.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_mma_packed",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "the same, weights kept packed in shared memory, unpacked at every fragment read",
        fused_quant=True,
        min_sm=(8, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/5_mma_packed.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_wgmma",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "Hopper wgmma from shared memory, scaling overlapped with the next block, offset added by the tensor cores",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/6_wgmma.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_wgmma_ws",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "the wgmma step with a producer warpgroup (copies, unpacking) and two consumer warpgroups, mbarriers",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/7_wgmma_ws.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_wgmma_splitk",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "the warp-specialized wgmma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/8_wgmma_splitk.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_wgmma_narrow",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "the split-K wgmma step with 64-token tiles (one consumer warpgroup) when N <= 64",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/9_wgmma_narrow.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_wgmma_small",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "weights as the wgmma's M from registers (raw bytes, no unpacking pass), tokens as its N (8-64), split-K",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/11_wgmma_small.cu",
    ),
    Kernel(
        "cuda_q4_0_f16_wgmma",
        "cuda",
        "q4_0",
        "f16",
        6,
        "fp16 wgmma for prefill: weights dequantized to fp16 in registers, activations rounded to fp16",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        file="06_decode_tensor_cores/12_wgmma_f16.cu",
    ),
    Kernel(
        "cuda_q4_0_q8_1_mma_splitk",
        "cuda",
        "q4_0",
        "q8_1",
        6,
        "the mma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(8, 0),
        q4_0_formula="signed",
        sum_x=True,
        file="06_decode_tensor_cores/10_mma_splitk.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_decode",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "decode: activations quantized once, copied by every CTA (PDL)",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/2_decode.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_mma",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "int8 tensor cores, 128x128 tiles, weights unpacked once per CTA, ldmatrix",
        fused_quant=True,
        min_sm=(8, 0),
        file="06_decode_tensor_cores/4_mma.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_wgmma",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "Hopper wgmma from shared memory, scaling overlapped with the next block, offset added by the tensor cores",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        sum_x=True,
        file="06_decode_tensor_cores/6_wgmma.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_wgmma_ws",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "the wgmma step with a producer warpgroup (copies, unpacking) and two consumer warpgroups, mbarriers",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        sum_x=True,
        file="06_decode_tensor_cores/7_wgmma_ws.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_wgmma_splitk",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "the warp-specialized wgmma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        sum_x=True,
        file="06_decode_tensor_cores/8_wgmma_splitk.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_wgmma_narrow",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "the split-K wgmma step with 64-token tiles (one consumer warpgroup) when N <= 64",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        sum_x=True,
        file="06_decode_tensor_cores/9_wgmma_narrow.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_wgmma_small",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "weights as the wgmma's M from registers (raw bytes, no unpacking pass), tokens as its N (8-64), split-K",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        sum_x=True,
        file="06_decode_tensor_cores/11_wgmma_small.cu",
    ),
    Kernel(
        "cuda_q8_0_f16_wgmma",
        "cuda",
        "q8_0",
        "f16",
        6,
        "fp16 wgmma for prefill: weights dequantized to fp16 in registers, activations rounded to fp16",
        fused_quant=True,
        min_sm=(9, 0),
        max_sm=(9, 0),
        file="06_decode_tensor_cores/12_wgmma_f16.cu",
    ),
    Kernel(
        "cuda_q8_0_q8_1_mma_splitk",
        "cuda",
        "q8_0",
        "q8_1",
        6,
        "the mma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(8, 0),
        file="06_decode_tensor_cores/10_mma_splitk.cu",
    ),
    # chapter 7: Q4_1 weights through chapter 6's decode step
    Kernel(
        "cuda_q4_1_q8_1_decode",
        "cuda",
        "q4_1",
        "q8_1",
        7,
        "decode: activations quantized once, copied by every CTA (PDL); d_w d_a sumi + m_w s_a",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/2_decode.cu",
    ),
    # chapter 7: Q4_1 weights through chapter 6's mma step (prefill)
    Kernel(
        "cuda_q4_1_q8_1_mma",
        "cuda",
        "q4_1",
        "q8_1",
        7,
        "int8 tensor cores, 128x128 tiles, nibbles unpacked once per CTA; + m_w s_a per block",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/4_mma.cu",
    ),
    Kernel(
        "cuda_q4_1_q8_1_mma_splitk",
        "cuda",
        "q4_1",
        "q8_1",
        7,
        "the mma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/10_mma_splitk.cu",
    ),
    # chapter 8: K-quant weights times Q8_1 activations, llama.cpp's CUDA pairing (MMVQ)
    Kernel(
        "cuda_q4_k_q8_1_decode",
        "cuda",
        "q4_k",
        "q8_1",
        8,
        "decode: cp.async-staged super-blocks, 8 lanes x 16 B each; d sc (q . u) - dmin m sum(u) per sub-block",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="08_k_quants/1_decode.cu",
    ),
    Kernel(
        "cuda_q6_k_q8_1_decode",
        "cuda",
        "q6_k",
        "q8_1",
        8,
        "decode: cp.async-staged 210-byte super-blocks (16-byte cover), int8 scale per 16 values, q - 32 per byte",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="08_k_quants/1_decode.cu",
    ),
    # chapter 8: Q4_K weights through chapter 6's mma step (prefill), as Q4_1's blocks of 32
    Kernel(
        "cuda_q4_k_q8_1_mma",
        "cuda",
        "q4_k",
        "q8_1",
        8,
        "int8 tensor cores, 128x128 tiles, a super-block per K step unpacked into 8 blocks: d sc, -dmin m",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/4_mma.cu",
    ),
    Kernel(
        "cuda_q4_k_q8_1_mma_splitk",
        "cuda",
        "q4_k",
        "q8_1",
        8,
        "the mma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(8, 0),
        sum_x=True,
        file="06_decode_tensor_cores/10_mma_splitk.cu",
    ),
    # chapter 8: Q6_K weights through chapter 6's mma step (prefill); no sum_x mode (4_mma.cu says why)
    Kernel(
        "cuda_q6_k_q8_1_mma",
        "cuda",
        "q6_k",
        "q8_1",
        8,
        "int8 tensor cores, 128x128 tiles, a super-block per K step unpacked to q - 32; two k16 mmas per block, d sc each",
        fused_quant=True,
        min_sm=(8, 0),
        file="06_decode_tensor_cores/4_mma.cu",
    ),
    Kernel(
        "cuda_q6_k_q8_1_mma_splitk",
        "cuda",
        "q6_k",
        "q8_1",
        8,
        "the mma step with split-K: a tile's K steps over several CTAs, partial sums added in order",
        fused_quant=True,
        min_sm=(8, 0),
        file="06_decode_tensor_cores/10_mma_splitk.cu",
    ),
]

KERNELS: dict[str, Kernel] = {k.name: k for k in sorted(_CPU + _CUDA, key=lambda k: k.chapter)}


def kernels(
    device: str | None = None, chapter: int | None = None, wfmt: str | None = None, afmt: str | None = None
) -> list[Kernel]:
    """The registered kernels, in teaching order, filtered by any of the fields."""
    return [
        k
        for k in KERNELS.values()
        if (device is None or k.device == device)
        and (chapter is None or k.chapter == chapter)
        and (wfmt is None or k.wfmt == wfmt)
        and (afmt is None or k.afmt == afmt)
    ]
