"""Timeline of the fp16 step's call (to_f16, GEMM, splitk_sum), graph-replayed, weights cold: medians of
each kernel's duration and start (the GEMM's after to_f16's start, splitk_sum's after the GEMM's end),
and the call (first start to last end). Run from the repository root; TAG labels the lines."""

import os
import statistics as st

import torch

import quantgemm_kernels as qk
from quantgemm_kernels.testing import quantize_weights
from quantgemm_kernels.measure import graphed
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

tag = os.environ.get("TAG", "")
for wf, M, K in (("q4_0", 4096, 14336), ("q4_0", 14336, 4096), ("q4_0", 4096, 4096), ("q8_0", 4096, 4096)):
    g = torch.Generator().manual_seed(0)
    W0 = quantize_weights(torch.randn(M, K, generator=g).cuda(), wf)
    ncop = max(8, int(4 * 50e6 / W0.numel() / W0.element_size()) + 1)
    Ws = [W0.clone() for _ in range(ncop)]
    for N in (4, 16, 64):
        A = torch.randn(N, K, generator=g).cuda()
        name = f"cuda_{wf}_f16_wgmma"

        def fn():
            for i in range(ncop):
                qk.gemm(A, Ws[i], name)

        rep, how = graphed(fn)
        for _ in range(3):
            rep()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(6):
                rep()
            torch.cuda.synchronize()
        ev = sorted(
            (e.start_ns(), e.end_ns(), e.name())
            for e in prof.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CUDA and e.duration_ns() > 0
        )
        c = [e for e in ev if "to_f16" in e[2]]
        gm = [e for e in ev if "wgmma_f16_kernel" in e[2]]
        sm = [e for e in ev if "splitk_sum" in e[2]]
        if len(c) != len(gm) or (sm and len(sm) != len(gm)):
            print("mismatch", len(c), len(gm), len(sm))
            continue
        m = st.median
        cd = m([(b - a) / 1e3 for a, b, _ in c])
        goff = m([(g_[0] - c_[0]) / 1e3 for c_, g_ in zip(c, gm)])
        gd = m([(b - a) / 1e3 for a, b, _ in gm])
        s = ""
        if sm:
            s = f"  sum starts +{m([(s_[0] - g_[1]) / 1e3 for g_, s_ in zip(gm, sm)]):.2f} after GEMM end, lasts {m([(b - a) / 1e3 for a, b, _ in sm]):.2f}"
        last = sm if sm else gm
        call = m([(l_[1] - c_[0]) / 1e3 for c_, l_ in zip(c, last)])
        print(
            f"{tag:8s} {wf} {M}x{K} N={N} {how}: to_f16 {cd:.2f}  GEMM starts +{goff:.2f}, lasts {gd:.2f}{s}  call {call:.2f}",
            flush=True,
        )
