// cuda/06_decode_tensor_cores/13_decode_bulk.cu (chapter 6): the decode kernel with its weights
// and activations moved by the copy engine (cp.async.bulk on mbarriers), one CTA per SM.
//
// What it teaches: where a GEMV's time goes when the weights are cold and the matrix is only
// 33 MB. The decode step (2_decode.cu) streams Q4_0 4096 x 14336 in 11.5 us (H200), a plain
// 16-byte-load kernel that only reads the same bytes takes 8.9: the gap is not bytes in flight
// (both keep about 64-74 KB per SM) but when they are in flight. There, each warp's first weight
// step and the activations are cp.async groups: the activations (which wait for the quantizer)
// queue behind the weight copies, and a warp's wait for them is a wait for its weight step too,
// so no warp issues its second step before both land: the memory system idles for about one
// latency at the start of a kernel that lasts about ten.
// Here: lane 0 of each warp moves a whole step (32 units of a row, 4608 B of Q4_0) with one bulk
// copy onto the warp's own mbarrier, and fills every slot of its ring before anything waits; the
// activations are two bulk copies per token on a barrier of their own, so that the warps compute
// as soon as their step and the activations are in, and the weight copies are not counted with
// them. One CTA of 16 warps per SM (not two of 8): the activations are staged once per SM, and
// the ring gets the shared memory the second copy of them took.
// Rows, items (steps, or packed groups of short rows), the arithmetic and the row sums are
// decode.cuh's; only the movement differs.
// Needs sm_90a here (bulk copies and mbarriers are sm_90; the package builds its Hopper-only steps
// for sm_90a); pick_kernel takes it on Hopper, the decode step elsewhere.
#include "decode.cuh"
#include "wgmma.cuh"  // bulk_copy, bar_init, bar_expect, bar_wait

namespace gpu {
namespace {
constexpr int BULK_WARPS = 16;
constexpr int BULK_THREADS = 32 * BULK_WARPS;
constexpr int BULK_MAX_SW = 4;  // ring slots per warp

// [excerpt: bulk_kernel]
template <class WF, int T, bool PACKED>
__global__ void __launch_bounds__(BULK_THREADS, 1)
    decode_bulk_kernel(ActSource src, const typename WF::block* __restrict__ W, float* __restrict__ C, int M, int K,
                       int nb_total, int kb0, int nb, bool accumulate, int SW) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using wg::bar_expect, wg::bar_init, wg::bar_wait, wg::bulk_copy;
    constexpr int VECS = Unit<WF>::VECS;
    constexpr int STEP_VECS = 32 * VECS;
    extern __shared__ __align__(128) int4 smem[];
    __shared__ uint64_t full[BULK_WARPS * BULK_MAX_SW], act_bar;
    const int nu = (nb + UNIT - 1) / UNIT;
    const DecodeSmem lay(T, nu, VECS, 0);  // activations only: the ring follows them
    char* base = (char*)smem;
    const ActSmem act{(int4*)(base + lay.act_qs), (float2*)(base + lay.act_ds), nu};
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint4* ring = (uint4*)(base + (lay.total + 127) / 128 * 128) + (size_t)warp * SW * STEP_VECS;
    uint64_t* bars = full + warp * BULK_MAX_SW;
    if (lane == 0)
        for (int s = 0; s < SW; s++) bar_init(&bars[s], 1);  // lane 0's expect_tx, then the copy's bytes
    if (threadIdx.x == 0) bar_init(&act_bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();

    const int warps_total = gridDim.x * BULK_WARPS;
    const int warp_global = blockIdx.x * BULK_WARPS + warp;
    constexpr bool packed = PACKED;
    const int R = packed ? 32 / nu : 1;
    const int seg = packed ? nu : 32;
    const int steps_per_row = (nu + 31) / 32;
    const int groups = (M + R - 1) / R;
    const int groups_mine = warp_global < groups ? (groups - 1 - warp_global) / warps_total + 1 : 0;
    const int items = groups_mine * steps_per_row;

    // Item i into slot i % SW: one bulk copy of its contiguous bytes (a step of one row, or the R
    // rows of a packed group), issued by lane 0, counted on the slot's barrier.
    auto issue = [&](int i) {
        if (lane == 0 && i < items) {
            const int g = warp_global + (i / steps_per_row) * warps_total, st = i % steps_per_row;
            const int r = g * R;
            const uint4* from = (const uint4*)(W + (int64_t)r * nb_total + kb0) + (int64_t)st * STEP_VECS;
            const int count = (packed ? min(R, M - r) * nu : min(32, nu - 32 * st)) * VECS;
            bar_expect(&bars[i % SW], count * 16);
            bulk_copy(ring + (i % SW) * STEP_VECS, from, count * 16, &bars[i % SW]);
        }
    };
    for (int i = 0; i < SW; i++) issue(i);  // every slot, before anything waits
    if (threadIdx.x == 0) {
        // The activations: the quantizer's image (programmatic dependent launch: wait for it here,
        // after the weight copies are on their way), T token rows of quants and of (d, s) pairs.
        grid_dependency_wait();
        const int u0 = kb0 / UNIT, qbytes = nu * A_UNIT_VECS * 16, dbytes = ds_pitch(nu) * 8;
        bar_expect(&act_bar, T * (qbytes + dbytes));
        for (int t = 0; t < T; t++) {
            bulk_copy(act.qs + (size_t)t * nu * A_UNIT_VECS, src.qs + ((size_t)t * src.nu_total + u0) * A_UNIT_VECS,
                      qbytes, &act_bar);
            bulk_copy(act.ds + (size_t)t * ds_pitch(nu),
                      src.ds + (size_t)t * ds_pitch(src.nu_total) + (size_t)u0 * A_UNIT_DS, dbytes, &act_bar);
        }
    }
    bar_wait(&act_bar, 0);

    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    for (int i = 0; i < items; i++) {
        bar_wait(&bars[i % SW], (i / SW) & 1);  // this slot's copy has landed
        const int st = i % steps_per_row, g = warp_global + (i / steps_per_row) * warps_total;
        const int u = packed ? lane % nu : 32 * st + lane;
        if (packed ? g * R + lane / nu < M : u < nu) {
            Unit<WF> cur;
            cur.load_shared(ring + (i % SW) * STEP_VECS + lane * VECS);
#pragma unroll
            for (int b = 0; b < UNIT; b++) {
                int v[WF::qs_words];
                float d_w;
                cur.block(b, v, d_w);
                block_times_tokens<WF, T>(v, d_w, 0.0f, act, UNIT * u + b, acc);
            }
        }
        if (st == steps_per_row - 1) {  // decode.cuh's finish_rows: butterfly per segment, fixed order
#pragma unroll
            for (int t = 0; t < T; t++) {
                for (int off = seg / 2; off > 0; off >>= 1) acc[t] += __shfl_xor_sync(QG_FULL_MASK, acc[t], off);
                const int r = g * R + lane / seg;
                if (lane % seg == 0 && r < M) {
                    float* c = C + (int64_t)t * M + r;
                    *c = accumulate ? *c + acc[t] : acc[t];
                }
                acc[t] = 0.0f;
            }
        }
        __syncwarp();      // every lane has read slot i % SW (its words are in registers, used above)...
        issue(i + SW);     // ...before lane 0 refills it
    }
#endif
}
// [end excerpt: bulk_kernel]

template <class WF, int T>
void launch_bulk_pass(const ActSource& src, const typename WF::block* W, float* C, int M, int K, int nb_total,
                      int kb0, int nb, bool accumulate, cudaStream_t stream) {
#if defined(QG_HAS_SM90A)
    const int nu = (nb + UNIT - 1) / UNIT;
    const size_t act = (DecodeSmem(T, nu, Unit<WF>::VECS, 0).total + 127) / 128 * 128;
    const size_t slot = (size_t)BULK_WARPS * 32 * Unit<WF>::VECS * 16;  // one slot for every warp
    const int SW = (int)std::min<size_t>(BULK_MAX_SW, (device_info().smem_optin - 1024 - act) / slot);
    if (SW < 1) throw std::runtime_error("decode_bulk: no room for the weight ring (K chunk too large)");
    const size_t smem = act + SW * slot;
    const bool packed = nb_total % UNIT == 0 && kb0 % UNIT == 0 && nb == nb_total && nu < 32 && 32 % nu == 0;
    auto kernel = packed ? decode_bulk_kernel<WF, T, true> : decode_bulk_kernel<WF, T, false>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int R = packed ? 32 / nu : 1, groups = (M + R - 1) / R;
    const int ctas = std::max(1, std::min((groups + BULK_WARPS - 1) / BULK_WARPS, device_info().sms));
    launch_maybe_pdl(kernel, dim3(ctas), dim3(BULK_THREADS), smem, stream, true, src, W, C, M, K, nb_total, kb0, nb,
                     accumulate, SW);
#else
    throw std::runtime_error("decode_bulk: this build has no sm_90a code");
#endif
}

// `fallback`: the decode step's launcher, for rows that are not whole units (K % 256 != 0), which
// that step reads block by block with 16-bit loads (no bulk copy: rows not 16-byte aligned).
template <class WF>
void gemm_decode_bulk(const GemmProblem& p, cudaStream_t stream, void (*fallback)(const GemmProblem&, cudaStream_t)) {
    const int nb_total = p.K / QK, nu_total = (nb_total + UNIT - 1) / UNIT;
    if (nb_total % UNIT != 0) return fallback(p, stream);
    // K chunk of a pass of T tokens: as many whole units (an even number) as leave room for one
    // ring slot per warp beside them.
    auto chunk_for = [&](int T) {
        const int budget = device_info().smem_optin - 1024 - 128 - BULK_WARPS * 32 * Unit<WF>::VECS * 16 - 16 - 8 * T;
        const int chunk_units = std::max(2, budget / (T * SMEM_PER_TOKEN_UNIT) / 2 * 2);
        return std::min(nb_total, chunk_units * UNIT);
    };
    int4* img_qs = (int4*)p.workspace;
    float2* img_ds = (float2*)(img_qs + (size_t)p.N * nu_total * A_UNIT_VECS);
    launch_image_quantizer(p, img_qs, img_ds, nb_total, nu_total, stream);
    for (int n0 = 0; n0 < p.N; n0 += MAX_T) {
        const int T = std::min(MAX_T, p.N - n0), chunk = chunk_for(T);
        const ActSource src{nullptr, img_qs + (size_t)n0 * nu_total * A_UNIT_VECS,
                            img_ds + (size_t)n0 * ds_pitch(nu_total), nu_total};
        for (int kb0 = 0; kb0 < nb_total; kb0 += chunk) {
            const int nb = std::min(chunk, nb_total - kb0);
            auto* W = (const typename WF::block*)p.W;
            float* C = p.C + (int64_t)n0 * p.M;
            const bool acc = kb0 > 0;
            switch (T) {
                case 1: launch_bulk_pass<WF, 1>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                case 2: launch_bulk_pass<WF, 2>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                case 3: launch_bulk_pass<WF, 3>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                case 4: launch_bulk_pass<WF, 4>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                case 5: launch_bulk_pass<WF, 5>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                case 6: launch_bulk_pass<WF, 6>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                case 7: launch_bulk_pass<WF, 7>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
                default: launch_bulk_pass<WF, 8>(src, W, C, p.M, p.K, nb_total, kb0, nb, acc, stream); break;
            }
        }
    }
}
}  // namespace
}  // namespace gpu

void cuda_q4_0_q8_1_decode_bulk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_decode_bulk<gpu::w_q4_0>(p, stream, cuda_q4_0_q8_1_decode);
}

void cuda_q8_0_q8_1_decode_bulk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_decode_bulk<gpu::w_q8_0>(p, stream, cuda_q8_0_q8_1_decode);
}
