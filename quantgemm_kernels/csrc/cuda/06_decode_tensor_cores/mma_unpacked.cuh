// cuda/06_decode_tensor_cores/mma_unpacked.cuh (chapter 6): the weight layout of the mma step
// (4_mma.cu) and of its split-K launch (10_mma_splitk.cu): each block unpacked once per CTA into
// int8 values in a [row][k] tile, fragments by ldmatrix. 4_mma.cu's header explains it.
#pragma once
#include "mma_tile.cuh"

namespace gpu {
namespace {
// The weights as int8 values [row][block * 32 + k] (Q4_0: 16 (q - 8), Q4_1 and Q4_K: q, Q6_K: q - 32), unpacked
// once per CTA; the fragments come by ldmatrix.
struct Unpacked {
    template <class WF>
    static constexpr int w_row() {
        return ROW;
    }
    // One block of a weight row into the tile: its values as int8 and its scale.
    template <class WF, class T>
    __device__ __forceinline__ static void store_block(T& tile, int r, int b, float d, const uint32_t* q) {
        uint4* dst = (uint4*)&tile.w[r][b * QK];
        if constexpr (WF::offset == 8) {  // Q4_0: word j's low nibbles are k = 4j.., its high ones 16 + 4j..
            dst[0] = make_uint4(q4_0_signed_lo(q[0]), q4_0_signed_lo(q[1]), q4_0_signed_lo(q[2]), q4_0_signed_lo(q[3]));
            dst[1] = make_uint4(q4_0_signed_hi(q[0]), q4_0_signed_hi(q[1]), q4_0_signed_hi(q[2]), q4_0_signed_hi(q[3]));
            tile.wd[b][wd_slot(r)] = d * (1.0f / 16);  // exact: the mma sums 16 (q - 8) a
        } else if constexpr (has_min<WF> && !is_k_quant<WF>) {
            // Q4_1: the nibbles as int8 0..15, in Q4_0's order
            dst[0] = make_uint4(q[0] & 0x0F0F0F0Fu, q[1] & 0x0F0F0F0Fu, q[2] & 0x0F0F0F0Fu, q[3] & 0x0F0F0F0Fu);
            dst[1] = make_uint4((q[0] >> 4) & 0x0F0F0F0Fu, (q[1] >> 4) & 0x0F0F0F0Fu, (q[2] >> 4) & 0x0F0F0F0Fu,
                                (q[3] >> 4) & 0x0F0F0F0Fu);
            tile.wd[b][wd_slot(r)] = d;  // the min: mma_tile.cuh stores it beside
        } else {
            // Q8_0's quants, and Q4_K's and Q6_K's values (unpacked by the staging, mma.cuh): as they are
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            tile.wd[b][wd_slot(r)] = d;
        }
    }
    template <class WF, class T>
    __device__ __forceinline__ static void load_a(int (&af)[MT][4], const T& cur, unsigned a_addr, unsigned stage,
                                                  int b, int wm, int g, int t) {
#pragma unroll
        for (int i = 0; i < MT; i++) ldsm_x4(af[i], a_addr + stage + i * 16 * ROW + b * QK);
    }
};
}  // namespace
}  // namespace gpu
