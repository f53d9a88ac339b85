// formats.h: llama.cpp's block formats Q4_0, Q8_0 and Q8_1, defined once for CPU and CUDA code.
//
// The layouts are ggml's (ggml-common.h): a block covers 32 consecutive values of one row,
// stored as an fp16 scale `d` (and for Q8_1 a second fp16 `s`) followed by the quants.
//
//   block_q4_0  18 B   d | qs[16]      value j   = (low nibble of qs[j]  - 8) * d      (j < 16)
//                                      value j+16 = (high nibble of qs[j] - 8) * d
//   block_q4_1  20 B   d | m | qs[16]  value j   = (low nibble of qs[j]) * d + m       (j < 16)
//   block_q8_0  34 B   d | qs[32]      value j   = qs[j] * d
//   block_q8_1  36 B   d | s | qs[32]  value j   = qs[j] * d, s = a per-block sum (see below)
//
// Note the 2-byte header: the quants of Q4_0 and Q8_0 start at offset 2, so they are only
// 2-byte aligned inside an array of blocks (18 and 34 are not multiples of 4). Reading them as
// 32-bit words needs two 16-bit loads; chapter 4 and appendix B explain why.
//
// The Python mirror of these structs is quantgemm_kernels/formats.py (numpy structured dtypes);
// tests/test_formats.py checks that the two agree. formats.def lists the formats once, as data.
#pragma once
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define QG_HD __host__ __device__ __forceinline__
#else
#define QG_HD static inline
#endif

#define QK 32  // values per block, the same for Q4_0, Q8_0 and Q8_1 (ggml's QK4_0 = QK8_0 = QK8_1)

typedef uint16_t fp16_bits;  // an IEEE half stored as its bits, as ggml_half is

struct block_q4_0 {
    fp16_bits d;         // scale
    uint8_t qs[QK / 2];  // nibbles: element j in the low half of qs[j], element j+16 in the high half
};
struct block_q4_1 {
    fp16_bits d;         // scale
    fp16_bits m;         // min: value j = nibble j * d + m
    uint8_t qs[QK / 2];  // nibbles, laid out as Q4_0's
};
struct block_q8_0 {
    fp16_bits d;    // scale
    int8_t qs[QK];  // quants
};
struct block_q8_1 {
    fp16_bits d;    // scale
    fp16_bits s;    // llama.cpp's CPU reference: d * sum(qs); its CUDA quantizer: sum(x)
    int8_t qs[QK];  // quants
};

static_assert(sizeof(block_q4_0) == 18, "Q4_0 block must be 18 bytes, as in ggml");
static_assert(sizeof(block_q4_1) == 20, "Q4_1 block must be 20 bytes, as in ggml");
static_assert(sizeof(block_q8_0) == 34, "Q8_0 block must be 34 bytes, as in ggml");
static_assert(sizeof(block_q8_1) == 36, "Q8_1 block must be 36 bytes, as in ggml");

// Formats as integers, for code that switches on them: QG_F32, then one per row of formats.def,
// then QG_F32_AS_Q8_1: float32 activations that a kernel quantizes to Q8_1 itself (chapter 6; the
// binding passes A as float32 and a workspace of act_workspace_bytes(N, K), gemm.h).
enum QgFormat : int {
    QG_F32 = 0,
#define QG_FORMAT(name, id, block, qk) id,
#include "formats.def"
#undef QG_FORMAT
    QG_F32_AS_Q8_1
};

// What the `s` of a Q8_1 block holds. llama.cpp uses both (see chapter 2).
enum Q8_1SumMode : int {
    Q8_1_S_D_SUM_Q = 0,  // s = d * sum(qs): quantize_row_q8_1_ref, the CPU backend (our default)
    Q8_1_S_SUM_X = 1,    // s = sum(x):      ggml-cuda's quantize_q8_1
};

// ---- fp16 <-> fp32, round to nearest even, the conversion ggml uses (FP16 library algorithm) ----
QG_HD uint32_t qg_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
QG_HD float qg_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

QG_HD float fp16_to_fp32(fp16_bits h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = qg_bits_f32(0x7800000u);  // 2^-112
    const float normalized = qg_bits_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = qg_bits_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? qg_f32_bits(denormalized) : qg_f32_bits(normalized));
    return qg_bits_f32(result);
}

QG_HD fp16_bits fp32_to_fp16(float f) {
    const float scale_to_inf = qg_bits_f32(0x77800000u);   // 2^112
    const float scale_to_zero = qg_bits_f32(0x08800000u);  // 2^-110
    float base = (f < 0 ? -f : f) * scale_to_inf;
    base *= scale_to_zero;
    const uint32_t w = qg_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = qg_bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = qg_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (fp16_bits)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// ---- the quants of one block, as 32-bit words, loaded with the alignment the block allows ----
// Q4_0/Q8_0 quants sit at byte offset 2: two 16-bit loads (llama.cpp's get_int_b2).
QG_HD int load_int_b2(const void* p, int i32) {
    const uint16_t* x16 = (const uint16_t*)p;
    return (int)((uint32_t)x16[2 * i32 + 0] | ((uint32_t)x16[2 * i32 + 1] << 16));
}
// Q8_1 quants sit at byte offset 4: one 32-bit load (llama.cpp's get_int_b4).
QG_HD int load_int_b4(const void* p, int i32) { return ((const int*)p)[i32]; }
