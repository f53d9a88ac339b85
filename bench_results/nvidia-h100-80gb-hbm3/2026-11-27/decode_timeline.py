"""Timeline of the decode call (quantizer + decode kernel), graph-replayed, weights cold: per-call medians of
the quantizer's duration, the decode kernel's start after the quantizer's start, its duration, and the call
(first start to last end, with quartiles). Run from the repository root; TAG labels the lines. LAYERS and NS
(environment) replace the layers and token counts below, e.g. LAYERS=q4_0:4096x14336,q8_0:4096x4096 NS=1,2,5."""

import os
import statistics as st

import torch

import quantgemm_kernels as qk
from quantgemm_kernels.testing import quantize_weights
from quantgemm_kernels.measure import graphed
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

tag = os.environ.get("TAG", "")
layers = [("q4_0", 4096, 14336), ("q4_0", 14336, 4096), ("q4_0", 4096, 4096), ("q8_0", 4096, 14336)]
if os.environ.get("LAYERS"):
    layers = [(f, *map(int, mk.split("x"))) for f, mk in (x.split(":") for x in os.environ["LAYERS"].split(","))]
ns = [int(n) for n in os.environ.get("NS", "1,2,3,4,8").split(",")]
for wf, M, K in layers:
    g = torch.Generator().manual_seed(0)
    W0 = quantize_weights(torch.randn(M, K, generator=g).cuda(), wf)
    ncop = max(8, int(4 * 50e6 / W0.numel() / W0.element_size()) + 1)
    Ws = [W0.clone() for _ in range(ncop)]
    for N in ns:
        A = torch.randn(N, K, generator=g).cuda()
        name = f"cuda_{wf}_q8_1_decode"

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
            [
                (e.start_ns(), e.end_ns(), e.name())
                for e in prof.profiler.kineto_results.events()
                if e.device_type() == DeviceType.CUDA and e.duration_ns() > 0
            ]
        )
        q = [e for e in ev if "quantize" in e[2]]
        d = [e for e in ev if "decode_kernel" in e[2]]
        if len(q) != len(d):
            print("mismatch", len(q), len(d))  # a call of more than one decode launch (K in chunks): skipped
            continue
        qd = [(b - a) / 1e3 for a, b, _ in q]
        off = [(dd[0] - qq[0]) / 1e3 for qq, dd in zip(q, d)]
        dd_ = [(b - a) / 1e3 for a, b, _ in d]
        call = [(dd[1] - qq[0]) / 1e3 for qq, dd in zip(q, d)]
        gap = [(q[i + 1][0] - d[i][1]) / 1e3 for i in range(len(q) - 1)]
        m = st.median
        print(
            f"{tag:10s} {wf} {M}x{K} N={N} {how}: quant {m(qd):.2f}  decode starts +{m(off):.2f}  decode {m(dd_):.2f}"
            f"  call {m(call):.2f} [{sorted(call)[len(call) // 4]:.2f},{sorted(call)[3 * len(call) // 4]:.2f}]  gap {m(gap):.2f}",
            flush=True,
        )
