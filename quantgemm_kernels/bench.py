"""Timing for the course: warm-up, repeats, medians; CUDA events on a GPU, perf_counter on a CPU.

Speed is measured here and in notebook cells, never asserted by tests.
"""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass

import torch

from . import formats as F
from .registry import KERNELS, Kernel


@dataclass
class Timing:
    median_s: float
    min_s: float
    reps: int


def machine_name(device: str = "cpu") -> str:
    """A short, honest description of what produced a number: the GPU's name, or the CPU's."""
    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, torch {torch.__version__})"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} threads (torch {torch.__version__})"


def time_callable(fn, device: str = "cpu", warmup: int = 3, reps: int = 10, min_time_s: float = 0.0) -> Timing:
    """Median time of ``fn()``. Repeats at least ``reps`` times and until ``min_time_s`` has passed."""
    for _ in range(warmup):
        fn()
    times = []
    t_start = time.perf_counter()
    while len(times) < reps or (time.perf_counter() - t_start) < min_time_s:
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        if len(times) >= 10_000:
            break
    return Timing(statistics.median(times), min(times), len(times))


def bytes_moved(k: Kernel, M: int, N: int, K: int) -> int:
    """The fewest bytes a kernel must move: weights, activations (as the kernel reads them) and C."""
    wbytes = M * K * 4 if k.wfmt == "f32" else M * (K // F.QK) * F.BLOCK_BYTES[k.wfmt]
    abytes = N * K * 4 if k.afmt == "f32" else N * (K // F.QK) * F.BLOCK_BYTES[k.afmt]
    return wbytes + abytes + N * M * 4


def bench_kernel(kernel, M: int, N: int, K: int, warmup: int = 3, reps: int = 10, seed: int = 0,
                 include_activation_quant: bool = True) -> dict:
    """Time one kernel on one shape. Returns a dict with the median time, GFLOP/s and GB/s."""
    from . import api

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(N, K, generator=g).to(k.device)
    W = torch.randn(M, K, generator=g).to(k.device)
    Wk = W if k.wfmt == "f32" else api.quantize(W, k.wfmt)
    if k.afmt == "f32" or include_activation_quant:
        fn = lambda: api.gemm(A, Wk, k)  # noqa: E731
    else:
        Aq = api.quantize(A, k.afmt, q8_1_sum=k.q8_1_sum)
        fn = lambda: api.gemm_quantized(Aq, Wk, k)  # noqa: E731
    t = time_callable(fn, k.device, warmup, reps)
    flops = 2.0 * M * N * K
    nbytes = bytes_moved(k, M, N, K)
    return {"kernel": k.name, "device": k.device, "M": M, "N": N, "K": K, "median_ms": t.median_s * 1e3,
            "min_ms": t.min_s * 1e3, "reps": t.reps, "gflops": flops / t.median_s / 1e9,
            "gbps": nbytes / t.median_s / 1e9, "bytes": nbytes}
