// cuda/06_decode_tensor_cores/5_mma_packed.cu (chapter 6): the mma's second step with one choice
// reversed: Q4_0 weights kept packed in shared memory.
//
// What it teaches: the trade between shared-memory traffic and arithmetic in the inner loop. The
// Q4_0 weights stay packed in the tile (16 bytes per block and row) and every fragment read
// unpacks them (two logic operations per word, as in the first step, 3_mma_regstage.cu). Everything
// else is mma_tile.cuh's, as in 4_mma.cu; this file holds the weight layout (Packed).
// Why it can be faster: half the shared-memory bytes, and passes, for the weights, and nothing to
// unpack between a step's copies and its barrier.
// What it still lacks: the logic is back in the inner loop, in each of the 4 warps that share a row,
// and the weight fragments are 32-bit loads instead of ldmatrix. Chapter 6 measures the two
// layouts against each other; the ladder goes on from 4_mma.cu. Q4_0 only.
// Measured against 4_mma.cu (H200, Q4_0, N = 512, K = 14336): 0.271 ms against 0.246 (4_mma.cu's
// tuning log).
// Grid: mma_tile.cuh's.
#include "mma_tile.cuh"

namespace gpu {
namespace {
// Q4_0 weights as stored, 16 bytes of nibbles per block and row (+16 per row: rows g hit banks
// 4g + t), unpacked into the mma's A fragments at every read.
struct Packed {
    template <class WF>
    static constexpr int w_row() {
        return KB * WF::qs_bytes + 16;
    }
    template <class WF, class T>
    __device__ __forceinline__ static void store_block(T& tile, int r, int b, float d, const uint32_t* q) {
        static_assert(WF::offset == 8, "Q4_0 only: the nibbles are what stays packed");
        *(uint4*)&tile.w[r][b * WF::qs_bytes] = make_uint4(q[0], q[1], q[2], q[3]);
        tile.wd[b][wd_slot(r)] = d * (1.0f / 16);
    }
    template <class WF, class T>
    __device__ __forceinline__ static void load_a(int (&af)[MT][4], const T& cur, unsigned a_addr, unsigned stage,
                                                  int b, int wm, int g, int t) {
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const uint8_t* p0 = &cur.w[wm + 16 * i + g][b * WF::qs_bytes + 4 * t];
            const uint32_t v0 = *(const uint32_t*)p0, v1 = *(const uint32_t*)(p0 + 8 * T::W_ROW);
            af[i][0] = (int)q4_0_signed_lo(v0);
            af[i][1] = (int)q4_0_signed_lo(v1);
            af[i][2] = (int)q4_0_signed_hi(v0);
            af[i][3] = (int)q4_0_signed_hi(v1);
        }
    }
};
}  // namespace
}  // namespace gpu

void cuda_q4_0_q8_1_mma_packed(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q4_0, gpu::Packed>(p, stream);
}
