"""The two roofs of a roofline plot, measured with torch: memory bandwidth (a large copy, and a
copy small enough to stay in the last-level cache) and the peak matmul rate per data type.

Chapters 3 and 4 draw their rooflines with :func:`measure_ceilings`; the benchmark command records
them in its header. The GPU measurement (``quantgemm_kernels.measure``) times its own ceilings as
it times kernels, with the profiler.
"""

from __future__ import annotations

import torch

from .machine import machine_name
from .timing import time_callable


def measure_ceilings(
    device: str = "cpu",
    copy_mb: float | None = None,
    matmul_n: int | None = None,
    reps: int = 5,
    cache_copy_mb: float | None = 16.0,
) -> dict:
    """The two roofs of a roofline plot, measured with torch on ``device``.

    * ``copy_gbps``: ``dst.copy_(src)`` of a large float32 tensor (256 MB on a CPU, 1 GB on a
      GPU by default), bytes read + written over the median time: the memory (DRAM/HBM) roof.
      A copy into a preallocated tensor, not ``clone()``: a fresh CPU allocation would time the
      page faults too.
    * ``copy_gbps_cache``: the same with ``cache_copy_mb`` (16 MB) that stays in the last-level
      cache. Repeated timing of one GEMM keeps its weights there when they fit (Q4_0 at
      m=4096, k=14336 is 33 MB: within a server CPU's L3 or an H100's 50 MB L2), so a kernel can
      beat the DRAM roof; this is the roof it meets instead.
    * ``matmul_tflops``: ``torch.matmul`` of two n x n matrices, 2n^3 / median time: fp32 on a
      CPU; fp32 (TF32 off), tf32, fp16 and int8 (``torch._int_mm``, where it runs) on a GPU.
    """
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("measure_ceilings('cuda') needs a CUDA GPU")
    copy_mb = copy_mb or (1024.0 if device == "cuda" else 256.0)
    n = matmul_n or (8192 if device == "cuda" else 2048)
    out = {
        "device": device,
        "machine": machine_name(device),
        "copy_mb": copy_mb,
        "cache_copy_mb": cache_copy_mb,
        "matmul_n": n,
        "matmul_tflops": {},
    }

    def copy_rate(mb):
        src = torch.rand(int(mb * 2**20 // 4), device=device)
        dst = torch.empty_like(src)
        t = time_callable(lambda: dst.copy_(src), device, warmup=2, reps=reps)
        return 2 * src.numel() * 4 / t.median_s / 1e9

    out["copy_gbps"] = copy_rate(copy_mb)
    if cache_copy_mb:
        out["copy_gbps_cache"] = copy_rate(cache_copy_mb)

    def mm_rate(dtype, label, allow_tf32=False):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        try:
            t = time_callable(lambda: torch.matmul(a, b), device, warmup=2, reps=reps)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        out["matmul_tflops"][label] = 2.0 * n**3 / t.median_s / 1e12

    mm_rate(torch.float32, "fp32")
    if device == "cuda":
        mm_rate(torch.float32, "tf32", allow_tf32=True)
        mm_rate(torch.float16, "fp16")
        try:
            a = torch.randint(-128, 127, (n, n), dtype=torch.int8, device=device)
            b = torch.randint(-128, 127, (n, n), dtype=torch.int8, device=device)
            # B column-major (b.t() of a row-major b): the layout cuBLASLt's fast int8 kernels take;
            # a row-major B runs several times slower and would understate the int8 rate
            t = time_callable(lambda: torch._int_mm(a, b.t()), device, warmup=2, reps=reps)
            out["matmul_tflops"]["int8"] = 2.0 * n**3 / t.median_s / 1e12  # tera-ops, not flops
        except Exception as e:  # noqa: BLE001 - int8 matmul support varies by torch and GPU
            out["int8_error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    return out
