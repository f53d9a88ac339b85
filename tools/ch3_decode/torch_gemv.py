"""torch's fp16 GEMV forms (torch.mv, F.linear) beside chapter 3's decode kernel, at M = 4096, K = 14336,
N = 1 and 8, cold and warm, timed as quantgemm_kernels.measure times (measure.profile_runs: CUPTI, the GPU
time of each call's kernels). Writes $OUT/torch_gemv.json (tools/ch3_decode/run.sh)."""

import json
import os
import torch
import torch.nn.functional as F
from quantgemm_kernels import api, measure

M, K = 4096, 14336
g = torch.Generator().manual_seed(0)
W = torch.randn(M, K, generator=g).cuda()
Wq = api.quantize(W, "q4_0")
W16 = api.dequantize(Wq, "q4_0").to(torch.float16)
l2 = measure.gpu_info()["l2_bytes"]
out = {}
for N in (1, 8):
    A = torch.randn(N, K, generator=g).cuda()
    A16 = A.half()
    cq, c16 = measure.copies_for(Wq.numel(), l2), measure.copies_for(W16.numel() * 2, l2)
    Wqs = [Wq] + [Wq.clone() for _ in range(cq - 1)]
    W16s = [W16] + [W16.clone() for _ in range(c16 - 1)]
    ops = torch.ops.quantgemm
    sides = {
        "ours cuda_q4_0_f32_decode": (
            lambda c, n: [ops.gemm(A, Wqs[i % c], "cuda_q4_0_f32_decode", 0) for i in range(n)],
            cq,
        ),
        "F.linear fp16": (lambda c, n: [F.linear(A16, W16s[i % c]) for i in range(n)], c16),
    }
    if N == 1:
        sides["torch.mv fp16"] = (lambda c, n: [torch.mv(W16s[i % c], A16[0]) for i in range(n)], c16)
    runs, names = [], []
    for name, (fn, c) in sides.items():
        for regime, cc in (("cold", c), ("warm", 1)):
            n = measure.calls_for(cc, 64)
            fn(cc, 3)
            runs.append((lambda fn=fn, cc=cc, n=n: fn(cc, n), n))
            names.append((name, regime))
    torch.cuda.synchronize()
    res = measure.profile_runs(runs)
    for (name, regime), r in zip(names, res):
        s = measure.spread(r["busy_us"])
        out[f"N={N} {name} {regime}"] = dict(s, kernels=r.get("kernels"))
        print(
            f"N={N} {name:28s} {regime}: median {s['median_us']:.2f} us, IQR {s['iqr_us']:.2f}, min {s['min_us']:.2f}, max {s['max_us']:.2f}  {measure._short(r['kernels'][-1]) if r.get('kernels') else ''}"
        )
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "torch_gemv.json"), "w"), indent=1, default=str)
