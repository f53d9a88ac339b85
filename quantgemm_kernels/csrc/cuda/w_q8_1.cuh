// cuda/w_q8_1.cuh (chapter 4): the weight formats that meet Q8_1 activations, as a GPU thread
// reads them: Q4_0 (W4A8) and Q8_0 (W8A8). The device twin of cpu/04_w4a8/w_q8_1.h, which derives the
// per-block arithmetic (the compensation); every kernel of chapter 4 is a template on one of the
// two structs below, so the loops are written once and W8A8 costs one line per kernel.
//
// Per block of 32 values, both formats give an integer dot product of stored quants,
//     sumi = sum_j q_w,j * q_a,j          (|sumi| <= 32 * 15 * 127 for Q4_0, 32 * 127 * 127 for Q8_0)
// then one line of float arithmetic, block_result below:
//     Q4_0: d_w * (d_a * sumi - 8 * s_a)   the nibbles are used as stored (0..15); the -8 is paid
//                                          once per block through s_a = d_a * sum_j q_a,j
//     Q8_0: d_w * d_a * sumi               the quants are already signed
// The int32 sum stays within one block; blocks are added in float (their scales differ).
//
// How a thread gets the quants, the part that differs between the kernels:
//   pair(qs, j, lo, hi)   elements j and j + 16 (j < 16) as ints: the plain integer kernels.
//                         Q4_0 byte j holds both (low nibble j, high nibble j + 16).
//   words(v, i, lo, hi)   from the quants as 32-bit words v[0 .. qs_words): elements 4i..4i+3
//                         (lo) and 4i+16..4i+19 (hi), i < 4, four int8 in one int, what __dp4a
//                         multiplies with Q8_1 words i and i + 4. For Q4_0, word i holds the
//                         nibbles of both groups: v & 0x0F0F0F0F keeps the low nibble of each
//                         byte, (v >> 4) & 0x0F0F0F0F the high one, each byte ends in 0..15.
//
// Alignment: which loads are legal. The rows start 16-byte aligned (api.py and bindings.cpp check
// the base pointers) and a row is a whole number of blocks, so inside the blocks:
//   block_q4_0  18 B, quants at byte 2: 2-byte aligned. 16-bit loads only; a 32-bit word is two
//   block_q8_0  34 B, quants at byte 2:   16-bit halves (load_int_b2 in formats.h, llama.cpp's
//                                         get_int_b2). A plain int load is "misaligned address".
//   block_q8_1  36 B, quants at byte 4: 4-byte aligned. 32-bit loads (load_int_b4); never 64- or
//                                       128-bit: block i's quants start at 36 i + 4 bytes from its
//                                       row, a multiple of 8 only for odd i and of 16 only for
//                                       i = 3 mod 4, and the row itself starts at 36 * nb * n.
// Wider loads need a layout we choose: a tile copied to shared memory (04_w4a8/5_vec_dp4a.cu).
//
// Every step file (04_w4a8/<n>_<step>.cu, and chapter 6's) defines gpu::gemm_q8_1_<step><WF>,
// instantiates it for both structs and defines both launchers, cuda_q4_0_q8_1_<step> and
// cuda_q8_0_q8_1_<step>. (Namespace gpu: the CPU side has its own
// w_q4_0 and w_q8_0 in the same library.)
#pragma once
#include "common.cuh"

namespace gpu {

// [excerpt: weight_formats]
struct w_q4_0 {
    using block = block_q4_0;
    static constexpr int offset = 8;               // a stored nibble q means the integer q - 8
    static constexpr int qs_bytes = QK / 2;        // 16 bytes of nibbles
    static constexpr int qs_words = qs_bytes / 4;  // 4 words

    __device__ __forceinline__ static void pair(const void* qs, int j, int& lo, int& hi) {
        const int q = ((const uint8_t*)qs)[j];
        lo = q & 0x0F;  // element j
        hi = q >> 4;    // element j + 16
    }
    __device__ __forceinline__ static void words(const int* v, int i, int& lo, int& hi) {
        lo = v[i] & 0x0F0F0F0F;         // low nibbles of word i: elements 4i .. 4i+3
        hi = (v[i] >> 4) & 0x0F0F0F0F;  // high nibbles of word i: elements 4i+16 .. 4i+19
    }
};

struct w_q8_0 {
    using block = block_q8_0;
    static constexpr int offset = 0;         // quants are already signed
    static constexpr int qs_bytes = QK;      // 32 bytes
    static constexpr int qs_words = QK / 4;  // 8 words

    __device__ __forceinline__ static void pair(const void* qs, int j, int& lo, int& hi) {
        lo = ((const int8_t*)qs)[j];           // element j
        hi = ((const int8_t*)qs)[j + QK / 2];  // element j + 16
    }
    __device__ __forceinline__ static void words(const int* v, int i, int& lo, int& hi) {
        lo = v[i];      // elements 4i .. 4i+3
        hi = v[i + 4];  // elements 4i+16 .. 4i+19
                        // [end excerpt: weight_formats]
    }
};

// Chapter 7: Q4_1, Q4_0's nibbles (same bytes, same words) with a min m instead of the offset 8:
// value = q * d + m. Its quants start at byte 4 of the block (after d and m), not 2.
struct w_q4_1 {
    using block = block_q4_1;
    static constexpr int offset = 0;  // nothing subtracted: m_w comes in through s_a
    static constexpr int qs_bytes = QK / 2;
    static constexpr int qs_words = qs_bytes / 4;
    __device__ __forceinline__ static void pair(const void* qs, int j, int& lo, int& hi) {
        w_q4_0::pair(qs, j, lo, hi);
    }
    __device__ __forceinline__ static void words(const int* v, int i, int& lo, int& hi) { w_q4_0::words(v, i, lo, hi); }
};
// Chapter 8: Q4_K as chapter 6's mma step reads it (06_decode_tensor_cores/4_mma.cu). A super-block
// (256 values, 144 B) is 8 Q4_1-like blocks of 32: block j has the scale d * sc_j and the min
// -dmin * m_j, and its 32 nibbles are unpacked while staging (mma.cuh) into 8 words of int8 values
// 0..15, as Q8_0's quants are kept. MMQ: the two products rounded to fp16, as llama.cpp's MMQ
// forms them (load_tiles_q4_K: half2 (d, -dmin) * (sc_j, m_j)), for the sum_x mode; otherwise
// exact in float32 (17 significant bits at most), as MMVQ and the reference use them.
template <bool MMQ>
struct w_q4_k {
    using block = block_q4_k;                // the stored super-block
    static constexpr int offset = 0;         // nothing subtracted: the min comes in through s_a
    static constexpr int qs_words = QK / 4;  // a block's 32 values, unpacked: 8 words of int8
    static constexpr bool mmq_scales = MMQ;
};
// Chapter 8: Q6_K as chapter 6's mma step reads it. A super-block (256 values, 210 B) is 8 blocks of
// 32 whose 6-bit quants q are unpacked while staging (mma.cuh) into the int8 values q - 32, as Q8_0's
// quants are kept; but its scales d * sc_t come per 16 values (t = 0..15), two per block of 32, so
// the step runs one mma of k = 16 per scale (mma_tile.cuh). No min: the activations' s is not read.
struct w_q6_k {
    using block = block_q6_k;                // the stored super-block
    static constexpr int offset = 0;         // the 32 is subtracted at staging: the values are signed
    static constexpr int qs_words = QK / 4;  // a block's 32 values, unpacked: 8 words of int8
};

template <class WF>
constexpr bool has_min = false;  // whether a block stores a min m after d
template <>
constexpr bool has_min<w_q4_1> = true;
template <bool MMQ>
constexpr bool has_min<w_q4_k<MMQ>> = true;  // -dmin * m_j per block of 32
// 32-value blocks per stored weight block: 1, the K-quants' super-block 8
template <class WF>
constexpr int blocks_per_stored = 1;
template <bool MMQ>
constexpr int blocks_per_stored<w_q4_k<MMQ>> = QK_K / QK;
template <>
constexpr int blocks_per_stored<w_q6_k> = QK_K / QK;
template <class WF>
constexpr bool is_k_quant = blocks_per_stored<WF> > 1;
// whether a block of 32 has two scales, one per 16 values (Q6_K), instead of one
template <class WF>
constexpr bool has_half_scales = false;
template <>
constexpr bool has_half_scales<w_q6_k> = true;

// One block's contribution, from the integer dot product and the three scales (and the weight
// block's min m_w, for formats that have one).
template <class WF>
__device__ __forceinline__ float block_result(float d_w, float d_a, float s_a, int sumi, float m_w = 0.0f) {
    if constexpr (has_min<WF>) {
        // Q4_1 (chapter 7): d_w d_a sumi + m_w s_a, as llama.cpp's vec_dot_q4_1_q8_1_impl (s_a = sum(x) there)
        return (float)sumi * (d_w * d_a) + m_w * s_a;
    } else if constexpr (WF::offset == 0) {
        (void)m_w;
        (void)s_a;  // not needed; it may even be inf (an fp16 overflow of a huge block's sum)
        return d_w * (d_a * (float)sumi);
    } else {
        return d_w * (d_a * (float)sumi - (float)WF::offset * s_a);  // the compensation
    }
}

// The steps of chapter 4, each in 04_w4a8/<n>_<step>.cu. C [N, M] = A (Q8_1) x W (WF)^T on `stream`.
template <class WF>
void gemm_q8_1_naive(const GemmProblem& p, cudaStream_t stream);
template <class WF>
void gemm_q8_1_tiled(const GemmProblem& p, cudaStream_t stream);
template <class WF>
void gemm_q8_1_dp4a(const GemmProblem& p, cudaStream_t stream);
template <class WF>
void gemm_q8_1_tiled_dp4a(const GemmProblem& p, cudaStream_t stream);
template <class WF>
void gemm_q8_1_vec_dp4a(const GemmProblem& p, cudaStream_t stream);
// Chapter 6: p.A is float32, quantized inside (QG_F32_AS_Q8_1). The decode and mma steps are
// templates on a second policy as well, in 06_decode_tensor_cores/decode.cuh and mma_tile.cuh.
template <class WF>
void gemm_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream);
template <class WF>
void gemm_q8_1_wgmma_ws(const GemmProblem& p, cudaStream_t stream);

}  // namespace gpu
