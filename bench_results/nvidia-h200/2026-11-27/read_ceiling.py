"""Cold pass over Q4_0 weights: plain loads vs a bulk-copy ring vs our decode kernel (kernel durations, CUPTI)."""

import collections
import numpy as np
import torch
from torch.profiler import profile, ProfilerActivity
from torch.utils.cpp_extension import load
import quantgemm_kernels as qk
from quantgemm_kernels.testing import quantize_weights

ext = load("read_ceiling", [__file__.replace(".py", ".cu")], extra_cuda_cflags=["-O3", "-arch=sm_90a"], verbose=False)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print(torch.cuda.get_device_name(0), "SMs", SMS, flush=True)


def act_image(A):  # one token: Q8_1 (d * sum q) as 17 int4 per unit + (d, s) float2 x 9 per unit
    K = A.shape[1]
    q = qk.quantize(A, "q8_1").cpu().numpy().reshape(-1, 36)
    d = q[:, 0:2].copy().view(np.float16).astype(np.float32).ravel()
    s = q[:, 2:4].copy().view(np.float16).astype(np.float32).ravel()
    qs = q[:, 4:].reshape(K // 256, 8 * 32)
    nu = K // 256
    img_q = np.zeros((nu, 17 * 16), np.uint8)
    img_q[:, :256] = qs
    img_ds = np.zeros((nu, 9, 2), np.float32)
    img_ds[:, :8, 0] = d.reshape(nu, 8)
    img_ds[:, :8, 1] = s.reshape(nu, 8)
    b = np.concatenate([img_q.ravel(), img_ds.view(np.uint8).ravel()])
    b = np.concatenate([b, np.zeros((-len(b)) % 16, np.uint8)])
    return torch.from_numpy(b).cuda()


def durations(fn, reps=60):
    for i in range(8):
        fn(i)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(reps):
            fn(i)
        torch.cuda.synchronize()
    d = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type.name == "CUDA" and "emcpy" not in e.name and "emset" not in e.name:
            d[e.name.split("(")[0].split("<")[0][-28:]].append(e.device_time)
    return {k: (np.percentile(v, 25), np.median(v), np.percentile(v, 75)) for k, v in d.items()}


rows = []
for M, K, rps_list in ((4096, 14336, (1,)), (14336, 4096, (2, 4)), (4096, 4096, (2, 4))):
    g = torch.Generator().manual_seed(0)
    W0 = quantize_weights(torch.randn(M, K, generator=g).cuda(), "q4_0")
    copies = max(8, int(np.ceil(4 * 60e6 / W0.numel())))
    Ws = [W0.clone() for _ in range(copies)]
    A = torch.randn(1, K, generator=g).cuda()
    img = act_image(A)
    ref = qk.gemm(A, W0, "cuda_q4_0_q8_1_decode").ravel()
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    mb = W0.numel() / 1e6
    tag = f"{M}x{K}"

    def rec(name, fn):
        r = durations(fn)
        parts = "  ".join(f"{k} {v[1]:.2f} [{v[0]:.2f},{v[2]:.2f}]" for k, v in r.items())
        tot = sum(v[1] for v in r.values())
        print(f"{tag} {name:<28} {parts}   sum {tot:.2f} us = {W0.numel() / tot / 1e3:.0f} GB/s", flush=True)
        rows.append((tag, name, tot))

    rec("decode (quantizer+kernel)", lambda i: qk.gemm(A, Ws[i % copies], "cuda_q4_0_q8_1_decode"))
    for U, per_sm, th in ((4, 8, 256), (4, 16, 256), (2, 16, 256)):
        rec(f"ldg U={U} {per_sm}x{th}", lambda i: ext.read_ldg(Ws[i % copies], SMS * per_sm, th, U, out))
    row_bytes = K // 256 * 144
    for rps in rps_list:
        for per_sm in (1, 2):
            for S in (8, 16, 24):
                smem = 20000 + S * rps * row_bytes
                if smem * per_sm > 225 * 1024:
                    continue
                for mode in (0, 1):
                    C = torch.full((M,), float("nan"), device="cuda")
                    ext.gemv_bulk(W0, img, C, M, K, SMS * per_sm, rps, S, mode)
                    if mode == 1:
                        torch.cuda.synchronize()
                        err = float(((C - ref) ** 2).sum() / (ref**2).sum())
                        bad = "" if err < 1e-10 else f" NMSE {err:.2e} BAD"
                    else:
                        bad = ""
                    rec(
                        f"bulk m{mode} rps{rps} {per_sm}/SM S{S}{bad}",
                        lambda i: ext.gemv_bulk(Ws[i % copies], img, C, M, K, SMS * per_sm, rps, S, mode),
                    )
    Ws = None  # free the copies before the next shape
    torch.cuda.empty_cache()
