// formats.h: llama.cpp's block formats (Q4_0, Q4_1, Q8_0, Q8_1; the K-quants Q4_K, Q6_K, Q8_K),
// defined once for CPU and CUDA code.
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

// ---- K-quants (chapter 8): super-blocks of QK_K = 256 values, ggml's block_q4_K, block_q6_K and
// block_q8_K (ggml-common.h), named in lower case as our format names are.
//
//   block_q4_k  144 B  d | dmin | scales[12] | qs[128]
//       sub-block s (32 values) has a 6-bit scale sc[s] and a 6-bit min m[s], packed in scales
//       (get_scale_min_k4 below); value = d * sc[s] * nibble - dmin * m[s]. qs[32c + l] holds
//       value 64c + l in its low nibble and value 64c + 32 + l in its high nibble.
//   block_q6_k  210 B  ql[128] | qh[64] | scales[16] | d
//       value = d * scales[j / 16] * (q - 32), q the 6-bit quant: its low 4 bits in ql, its high 2
//       bits in qh. In each half of 128 values (ql += 64, qh += 32 per half), value 32k + l has
//       its low bits in ql[l + 32 * (k & 1)] (low nibble for k < 2, high for k >= 2) and its high
//       bits at bit 2k of qh[l].
//   block_q8_k  292 B  d (float32) | qs[256] | bsums[16]
//       value = qs[j] * d; bsums[i] = qs[16i] + ... + qs[16i + 15], for the Q4_K min term.
#define QK_K 256

struct block_q4_k {
    fp16_bits d;           // super-block scale of the 6-bit scales
    fp16_bits dmin;        // super-block scale of the 6-bit mins
    uint8_t scales[12];    // eight 6-bit scales and eight 6-bit mins, packed
    uint8_t qs[QK_K / 2];  // nibbles
};
struct block_q6_k {
    uint8_t ql[QK_K / 2];      // low 4 bits of the quants
    uint8_t qh[QK_K / 4];      // high 2 bits of the quants
    int8_t scales[QK_K / 16];  // one signed 8-bit scale per 16 values
    fp16_bits d;               // super-block scale
};
struct block_q8_k {
    float d;                   // scale (float32, not fp16)
    int8_t qs[QK_K];           // quants
    int16_t bsums[QK_K / 16];  // sums of 16 quants
};

static_assert(sizeof(block_q4_k) == 144, "Q4_K block must be 144 bytes, as in ggml");
static_assert(sizeof(block_q6_k) == 210, "Q6_K block must be 210 bytes, as in ggml");
static_assert(sizeof(block_q8_k) == 292, "Q8_K block must be 292 bytes, as in ggml");

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K block (ggml's get_scale_min_k4):
// j < 4: the low 6 bits of scales[j] and scales[j + 4]; j >= 4: a low nibble of scales[j + 4]
// (scale) or its high nibble (min), and the top 2 bits of scales[j - 4] or scales[j].
QG_HD void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

// Formats as integers, for code that switches on them: QG_F32, then one per row of formats.def,
// then QG_F32_AS_Q8_1: float32 activations that a kernel quantizes to Q8_1 itself (chapter 6; the
// binding passes A as float32 and a workspace of act_workspace_bytes(N, K), gemm.h), and
// QG_F32_AS_F16: float32 activations that a kernel rounds to fp16 itself (chapter 6's fp16 step;
// a workspace of f16_workspace_bytes).
enum QgFormat : int {
    QG_F32 = 0,
#define QG_FORMAT(name, id, block, qk) id,
#include "formats.def"
#undef QG_FORMAT
    QG_F32_AS_Q8_1,
    QG_F32_AS_F16
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
