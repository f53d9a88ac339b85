"""GPU measurements a kernel engineer can redo: kernel time from the profiler, weights cold or warm
in the L2, every batch size a model meets, llama.cpp and cuBLAS on the same shapes, in one run.

``python -m quantgemm_kernels.measure`` (``--help`` lists the options) writes one record,
``bench_results/<gpu>/<date>/sweep-<time>.json``, that chapters 5 and 6 read.

**One timing mechanism for every side.** A side's time for one call is the time the GPU is busy
with it: the union of the intervals of the GPU activities (kernels, device memsets and copies) the
call puts on the GPU, as CUPTI records them (through ``torch.profiler``). Where the activities do
not overlap, that is the sum of their durations. For our chapter-6 kernels that is the activation
quantizer and the GEMM kernel; for llama.cpp's ``mul_mat`` its activation quantizer and MMVQ or MMQ
(``quantize_q8_1`` before MMVQ; ``quantize_mmq_q8_1``, MMQ's own, before MMQ, and MMQ's stream-k
fix-up); for cuBLAS its GEMM kernel(s), on activations already in fp16 or int8. Host code (Python,
torch's dispatcher, ggml's graph walk) and the gaps between launches are not in it; ``span_us``
adds them back (first start to last end of a run of calls, per call). Our calls and cuBLAS's are
captured into a CUDA graph and replayed (:func:`graphed`; ggml's backend launches its own graph, as
a CUDA graph where it uses one), so that the GPU gets each side's kernels as fast as it runs them.
Where a kernel launched with programmatic dependent launch overlaps the one before it (our decode
kernel starts while its quantizer runs, and waits inside for its results; llama.cpp's kernels
overlap too), the overlap counts once; the plain sum of durations, which counts it twice, is in
the record beside it (``sum_median_us``).

**Two cache regimes.** *Cold*, the primary figure: call ``i`` reads weight copy ``i mod C``, the
``C`` copies together at least ``4 x`` the L2 (as a model's layers do: each layer's weights are read
once per token, long evicted since their last use). *Warm*: every call reads one copy, which stays
in the L2 when it fits (the 33 MB of a Q4_0 4096 x 14336 layer fit an H200's 60 MB L2).

**Spread.** Every call is one sample; a row gives min, quartiles, median, max and IQR. The host's
load average is recorded before and after; a run is refused when the host is busy (another build
or benchmark) unless ``--allow-busy``, and flagged when it became busy during the run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .registry import KERNELS

#: batch sizes of a model's life: decode (1-8), speculative decoding and batched serving (16-256),
#: prefill (512-4096)
N_SWEEP = (1, 2, 3, 4, 5, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
#: (M, K) of the linear layers of a Llama-3-8B block: attn q/o (4096 x 4096), ffn gate/up
#: (14336 x 4096), ffn down (4096 x 14336; llama.cpp's test-backend-ops MUL_MAT shape)
SHAPES = {"llama3-8b": [(4096, 14336), (4096, 4096), (14336, 4096)], "down": [(4096, 14336)], "small": [(512, 1024)]}
#: our kernels timed by default: the chapter-6 kernels (the ladder's intermediate steps,
#: decode_fused, mma_regstage and mma_packed, are in the older records)
DEFAULT_KERNELS = (
    "cuda_{w}_q8_1_decode",
    "cuda_{w}_q8_1_mma",
    "cuda_{w}_q8_1_wgmma",
    "cuda_{w}_q8_1_wgmma_ws",
    "cuda_{w}_q8_1_wgmma_splitk",
    "cuda_{w}_q8_1_wgmma_narrow",
    "cuda_{w}_q8_1_wgmma_small",
    "cuda_{w}_f16_wgmma",
)
DECODE_MAX_N = 64  #: the decode kernel's time grows with N (a pass per 8 tokens): not timed beyond
SMALL_MAX_N = 64  #: past 64 tokens the small-batch wgmma step runs the fifth step: not timed twice
COLD_FACTOR = 4.0  #: cold copies total at least this many times the L2

#: Vendor datasheet figures (dense, no sparsity), by torch.cuda.get_device_name(). Leads, not
#: measurements: the record holds the measured copy bandwidth and library rates beside them.
DATASHEET = {
    "NVIDIA H200": {
        "hbm_gbps": 4800.0,
        "fp16_tflops": 989.5,
        "int8_tops": 1979.0,
        "source": "NVIDIA H200 Tensor Core GPU datasheet (SXM), dense",
    },
    "NVIDIA H100 80GB HBM3": {
        "hbm_gbps": 3350.0,
        "fp16_tflops": 989.5,
        "int8_tops": 1979.0,
        "source": "NVIDIA H100 Tensor Core GPU datasheet (SXM5), dense",
    },
}


# ---------------------------------------------------------------------------------------------
# Pieces that need no GPU (unit-tested on the CPU)
# ---------------------------------------------------------------------------------------------


def copies_for(copy_bytes: int, l2_bytes: int, factor: float = COLD_FACTOR) -> int:
    """Weight copies for the cold regime: together at least ``factor`` x the L2, and at least 2."""
    if copy_bytes <= 0 or l2_bytes <= 0:
        raise ValueError(f"copy_bytes and l2_bytes must be positive, got {copy_bytes} and {l2_bytes}")
    return max(2, math.ceil(factor * l2_bytes / copy_bytes))


def calls_for(copies: int, min_calls: int) -> int:
    """Calls in a timed run: at least ``min_calls``, a whole number of rotations over the copies."""
    if copies < 1 or min_calls < 1:
        raise ValueError(f"copies and min_calls must be >= 1, got {copies} and {min_calls}")
    return copies * math.ceil(min_calls / copies)


def spread(samples_us) -> dict:
    """min, quartiles, median, max, mean and IQR of per-call times (microseconds)."""
    x = np.asarray(list(samples_us), dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("spread needs at least one finite sample")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return {
        "min_us": float(x.min()),
        "q1_us": float(q1),
        "median_us": float(med),
        "q3_us": float(q3),
        "max_us": float(x.max()),
        "mean_us": float(x.mean()),
        "iqr_us": float(q3 - q1),
        "samples": int(x.size),
    }


@dataclass
class Activity:
    """One GPU activity as CUPTI recorded it."""

    name: str
    start_ns: int
    end_ns: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def per_call(acts: list[Activity], calls: int) -> dict:
    """Split the activities of a run of ``calls`` identical calls into calls and time each.

    Every call puts the same number of activities on the GPU, in stream order, so consecutive
    groups of ``len(acts) / calls`` are the calls. Returns the per-call busy times (the length of
    the union of the group's intervals, microseconds: overlapping activities count once), the
    per-call sums of durations, the span per call (first start to last end of the run,
    divided by ``calls``: launch gaps included) and the kernel names of one call. Raises when the
    activities do not divide into ``calls`` equal groups (a side whose calls differ, or lost
    records): a wrong grouping would give wrong spreads, so none is guessed.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if not acts:
        raise ValueError("no GPU activity was recorded for the run")
    acts = sorted(acts, key=lambda a: a.start_ns)
    if len(acts) % calls:
        names = sorted({a.name[:60] for a in acts})
        raise ValueError(f"{len(acts)} GPU activities do not split into {calls} equal calls: {names}")
    k = len(acts) // calls
    groups = [acts[i * k : (i + 1) * k] for i in range(calls)]
    busy = [union_ns(g) / 1e3 for g in groups]
    sums = [sum(a.dur_ns for a in g) / 1e3 for g in groups]
    span = (max(a.end_ns for a in acts) - acts[0].start_ns) / 1e3 / calls
    return {"busy_us": busy, "sum_us": sums, "span_us": span, "per_call": k, "kernels": [a.name for a in acts[:k]]}


def union_ns(acts: list[Activity]) -> int:
    """Length of the union of the activities' [start, end) intervals (ns): overlaps count once."""
    total, cur_start, cur_end = 0, None, None
    for a in sorted(acts, key=lambda a: a.start_ns):
        if cur_end is None or a.start_ns > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a.start_ns, a.end_ns
        else:
            cur_end = max(cur_end, a.end_ns)
    return total + (cur_end - cur_start if cur_end is not None else 0)


def split_on_markers(acts: list[Activity], marker: str) -> list[list[Activity]]:
    """The activities between consecutive marker kernels (a name containing ``marker``)."""
    acts = sorted(acts, key=lambda a: a.start_ns)
    segments, cur, seen = [], [], False
    for a in acts:
        if marker in a.name:
            if seen:
                segments.append(cur)
            cur, seen = [], True
        elif seen:
            cur.append(a)
    return segments


def host_load(threads_used: int = 1) -> dict:
    """The host's 1-minute load average and CPU count; ``busy`` when the load, less the threads
    this process itself keeps running, exceeds a quarter of the CPUs (at least 2): another build or
    benchmark is running and host-launched timings (llama.cpp's) would move."""
    cpus = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    limit = max(2.0, 0.25 * cpus)
    return {"load1": load, "cpus": cpus, "limit": limit, "busy": bool(load - threads_used > limit)}


def nmse_gpu(result, reference) -> float:
    """llama.cpp's NMSE, sum((a - b)^2) / sum(a^2) with a the reference, in float64 on the tensors'
    device (the numpy :func:`quantgemm_kernels.reference.nmse` for large outputs); inf on NaN."""
    a, b = reference.double(), result.double()
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(b.shape)} vs reference {tuple(a.shape)}")
    if bool(a.isnan().any()) or bool(b.isnan().any()):
        return float("inf")
    num, den = float(((a - b) ** 2).sum()), float((a**2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def _short(name: str) -> str:
    """A kernel name without its template arguments and parameter list."""
    out, depth = [], 0
    for ch in name.replace("(anonymous namespace)::", ""):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    return s.split(" ")[-1] if " " in s else s


# ---------------------------------------------------------------------------------------------
# The profiler
# ---------------------------------------------------------------------------------------------

_MARK = None


def _marker_name() -> str:
    return "FillFunctor<double>"


def _mark(i: int) -> None:
    """A tiny kernel that no side launches (a float64 fill): it separates the runs in the trace."""
    import torch

    global _MARK
    if _MARK is None:
        _MARK = torch.empty(1, dtype=torch.float64, device="cuda")
    _MARK.fill_(float(i))


def profile_runs(runs: list[tuple]) -> list[dict]:
    """Run ``(fn, calls)`` pairs under the profiler, one after the other with the GPU idle between
    them, and return :func:`per_call` of each. ``fn()`` performs ``calls`` calls (asynchronously or
    not); everything it puts on any stream of the process's context is recorded."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events")  # one session per call: nothing lost
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i, (fn, _calls) in enumerate(runs):
                torch.cuda.synchronize()
                _mark(i)
                torch.cuda.synchronize()
                fn()
                torch.cuda.synchronize()
            _mark(len(runs))
            torch.cuda.synchronize()
    acts = [
        Activity(e.name(), int(e.start_ns()), int(e.end_ns()))
        for e in prof.profiler.kineto_results.events()
        if e.device_type() == DeviceType.CUDA and e.duration_ns() > 0
    ]
    segments = split_on_markers(acts, _marker_name())
    if len(segments) != len(runs):
        raise RuntimeError(f"the trace holds {len(segments)} runs between markers, expected {len(runs)}")
    out = []
    for seg, (_fn, calls) in zip(segments, runs):
        try:
            out.append(per_call(seg, calls))
        except ValueError as e:  # recorded as an error row, not guessed
            out.append({"error": str(e)})
    return out


# ---------------------------------------------------------------------------------------------
# The machine and its ceilings
# ---------------------------------------------------------------------------------------------


def graphed(fn):
    """``fn``'s GPU work captured once into a CUDA graph, and ``(replay, "graph")``: the calls then
    reach the GPU as fast as it runs them, as ggml's CUDA backend replays its graph, so host code
    (Python, the dispatcher) leaves no gaps between them, and a kernel launched with programmatic
    dependent launch can start while the one before it runs. A side that cannot be captured is
    returned as it is, ``(fn, "eager (...)")``, and its rows say so."""
    import torch

    from .bench.timing import capture_graph

    torch.cuda.synchronize()
    try:
        g = capture_graph(fn)
    except Exception as e:  # noqa: BLE001 (any failure to capture: run eagerly, and say so)
        torch.cuda.synchronize()
        return fn, f"eager (capture failed: {type(e).__name__})"
    torch.cuda.synchronize()
    return g.replay, "graph"


def gpu_info() -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    info = {
        "name": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "sms": p.multi_processor_count,
        "l2_bytes": int(getattr(p, "L2_cache_size", 0)),
        "memory_bytes": int(p.total_memory),
    }
    try:
        q = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if q.returncode == 0:
            drv, sm, mem, power = [v.strip() for v in q.stdout.strip().splitlines()[0].split(",")]
            info.update(driver=drv, max_sm_clock=sm, max_mem_clock=mem, power_limit=power)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return info


def measure_ceilings(copy_mb: float = 2048.0, n: int = 8192) -> dict:
    """What the GPU does at best, timed the same way (CUPTI, median of 20): a device-to-device
    copy (bytes read + written per second), cuBLAS fp16 and cuBLASLt int8 on n x n x n (int8 with
    B column-major, the layout its fast kernels take: ``torch._int_mm(a, b.t())``)."""
    import torch

    src = torch.rand(int(copy_mb * 2**20 // 4), device="cuda")
    dst = torch.empty_like(src)
    a16, b16 = (
        torch.randn(n, n, device="cuda", dtype=torch.float16),
        torch.randn(n, n, device="cuda", dtype=torch.float16),
    )
    a8 = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
    b8 = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
    reps = 20
    for _ in range(3):
        dst.copy_(src), torch.matmul(a16, b16), torch._int_mm(a8, b8.t())
    res = profile_runs(
        [
            (lambda: [dst.copy_(src) for _ in range(reps)], reps),
            (lambda: [torch.matmul(a16, b16) for _ in range(reps)], reps),
            (lambda: [torch._int_mm(a8, b8.t()) for _ in range(reps)], reps),
        ]
    )
    med = [statistics.median(r["busy_us"]) * 1e-6 for r in res]
    return {
        "copy_gbps": 2 * src.numel() * 4 / med[0] / 1e9,
        "copy_mb": copy_mb,
        "cublas_fp16_tflops": 2.0 * n**3 / med[1] / 1e12,
        "cublaslt_int8_tops": 2.0 * n**3 / med[2] / 1e12,
        "matmul_n": n,
        "int8_kernel": _short(res[2]["kernels"][-1]),
        "fp16_kernel": _short(res[1]["kernels"][-1]),
    }


# ---------------------------------------------------------------------------------------------
# The sides
# ---------------------------------------------------------------------------------------------


@dataclass
class Side:
    """One thing timed at one shape: ``launch(i)`` puts one call on the GPU that reads weight copy i."""

    name: str
    source: str  #: "ours", "llama.cpp" or "cuBLAS"
    includes: str  #: what one call's time includes
    q8_1_sum: str = ""  #: Q8_1 s mode of the activations (ours), or the formula llama.cpp uses
    extra: dict = field(default_factory=dict)


def _weight_bytes(wfmt: str, M: int, K: int) -> int:
    from . import formats as F

    return M * F.row_bytes(wfmt, K)


def measure_shape(
    wfmt: str,
    M: int,
    K: int,
    Ns,
    *,
    kernels=None,
    ggml: bool = True,
    cublas: bool = True,
    fp16_a: bool = False,
    min_calls: int = 32,
    seed: int = 0,
    l2_bytes: int | None = None,
    progress=print,
) -> list[dict]:
    """Every side at every N for one weight format and layer shape, cold and warm. One row per
    (side, N, regime). ``fp16_a``: the fp16 step also on fp16 activations (source "ours (fp16 A)")."""
    import torch

    from . import api, llamacpp, testing
    from . import formats as F
    from .registry import KERNELS

    l2 = l2_bytes or gpu_info()["l2_bytes"]
    cap = torch.cuda.get_device_capability()
    names = [n.format(w=wfmt) for n in (kernels or DEFAULT_KERNELS)]
    ours = [KERNELS[n] for n in names if n in KERNELS and KERNELS[n].runs_on(cap)]
    ops = torch.ops.quantgemm
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(M, K, generator=g).cuda()
    Wq = testing.quantize_weights(W, wfmt)  # K-quants: quantized on the CPU (no CUDA quantizer)
    wbytes = Wq.numel()
    Cq = copies_for(wbytes, l2)
    Wqs = [Wq] + [Wq.clone() for _ in range(Cq - 1)]
    on_gpu = F.SPECS[wfmt].cuda  # a CUDA dequantizer too
    # the reference's weights: the quantized values
    Wdeq = (api.dequantize(Wq, wfmt) if on_gpu else api.dequantize(Wq.cpu(), wfmt).cuda()).double()
    if cublas:
        W16 = Wdeq.to(torch.float16)
        C16 = copies_for(W16.numel() * 2, l2)
        W16s = [W16] + [W16.clone() for _ in range(C16 - 1)]
        W8 = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g).cuda()
        C8 = copies_for(W8.numel(), l2)
        W8s = [W8] + [W8.clone() for _ in range(C8 - 1)]
    Wq_np = Wq.cpu().numpy() if ggml else None
    rows = []
    for N in Ns:
        t0 = time.perf_counter()
        A = torch.randn(N, K, generator=g).cuda()
        ref = A.double() @ Wdeq.T
        base = {
            "wfmt": wfmt,
            "M": M,
            "N": N,
            "K": K,
            "weight_bytes": wbytes,
            "bytes": wbytes + N * K * 4 + N * M * 4,
            "flops": 2.0 * M * N * K,
        }
        sides: list[tuple[Side, object, object, int, object]] = []  # side, cold runner, warm runner, copies, output

        for k in ours:
            if ("decode" in k.name and N > DECODE_MAX_N) or (k.name.endswith("_wgmma_small") and N > SMALL_MAX_N):
                continue
            # llama.cpp's activation bytes (s = sum(x)) wherever the kernel can take them: the
            # kernels that quantize A themselves where they offer it, the others through the quantizer.
            # W4A16 kernels (chapter 3, afmt f32) take float32 A as it is: no quantizer, no mode.
            # The fp16 step (afmt f16) rounds A to fp16 itself: no Q8_1 either.
            f32, f16 = k.afmt == "f32", k.afmt == "f16"
            mode = "d_sum_q" if f32 or f16 else ("sum_x" if (k.sum_x or not k.fused_quant) else "d_sum_q")
            m = api._SUM_MODE[mode]

            def run(copies, calls, name=k.name, m=m, A=A, one_op=k.fused_quant or f32):
                ws = Wqs[:copies]
                if one_op:  # one op: the kernel's own quantizer (if any), then the GEMM
                    return lambda: [ops.gemm(A, ws[i % copies], name, m) for i in range(calls)]
                return lambda: [ops.gemm(ops.quantize(A, "q8_1", m), ws[i % copies], name) for i in range(calls)]

            out = api.gemm(A, Wq, k.name, q8_1_sum=None if f32 or f16 else mode)
            sides.append(
                (
                    Side(
                        k.name,
                        "ours",
                        "GEMM kernel alone (float32 A in, float32 C out; the weights' format times float32 A)"
                        if f32
                        else "fp16 conversion of A + GEMM kernel (float32 A in, float32 C out)"
                        if f16
                        else "activation quantizer + GEMM kernel (float32 A in, float32 C out)"
                        + ("" if k.fused_quant else "; two ops"),
                        "" if f32 or f16 else mode,
                    ),
                    run,
                    Cq,
                    out,
                )
            )
            if f16 and fp16_a:  # the same kernel given fp16 activations: no conversion pass
                A16a = A.to(torch.float16)

                def run_a16(copies, calls, name=k.name, A16a=A16a):
                    ws = Wqs[:copies]
                    return lambda: [ops.gemm(A16a, ws[i % copies], name, 0) for i in range(calls)]

                sides.append(
                    (
                        Side(
                            f"{k.name} (fp16 A)",
                            "ours (fp16 A)",
                            "GEMM kernel alone on fp16 A (the caller's, no conversion pass; float32 C out)",
                            "",
                        ),
                        run_a16,
                        Cq,
                        api.gemm(A16a, Wq, k.name),
                    )
                )
        if ggml:
            A_np = A.cpu().numpy()

            def ggml_run(copies, calls, A_np=A_np):
                reps = max(1, math.ceil(calls / copies))
                runner = llamacpp.MulMatRunner([Wq_np] * copies, A_np, wfmt, backend="cuda", repeats=reps)
                runner.compute()  # warm-up (and, where ggml uses them, its CUDA graph)
                return runner

            r = ggml_run(1, 1)
            out_g = torch.from_numpy(r.result(0)).cuda()
            r.close()
            sides.append(
                (
                    Side(
                        "llama.cpp",
                        "llama.cpp",
                        "ggml mul_mat: quantize_q8_1 + MMVQ, or quantize_mmq_q8_1 + MMQ "
                        "(+ stream-k fix-up), float32 A in, float32 C out",
                        "sum_x (ggml-cuda)",
                    ),
                    ggml_run,
                    Cq,
                    out_g,
                )
            )
        if cublas:
            A16 = A.to(torch.float16)

            def run16(copies, calls, A16=A16):
                return lambda: [torch.matmul(A16, W16s[i % copies].t()) for i in range(calls)]

            sides.append(
                (
                    Side(
                        "cuBLAS fp16",
                        "cuBLAS",
                        "torch.matmul on fp16 A and the dequantized weights in fp16 (fp16 out); no conversion of A",
                    ),
                    run16,
                    C16,
                    torch.matmul(A16, W16.t()),
                )
            )
            if N > 16:  # torch._int_mm needs more than 16 rows in A
                A8 = torch.randint(-128, 128, (N, K), dtype=torch.int8, generator=g).cuda()

                def run8(copies, calls, A8=A8):
                    return lambda: [torch._int_mm(A8, W8s[i % copies].t()) for i in range(calls)]

                sides.append(
                    (
                        Side(
                            "cuBLASLt int8",
                            "cuBLAS",
                            "torch._int_mm, int8 A, int8 weights column-major (int32 out); random int8 data, no scales",
                        ),
                        run8,
                        C8,
                        None,
                    )
                )

        plans = []  # (side, regime, copies, calls, fn or runner)
        launches = {("llama.cpp", r): "ggml_backend_graph_compute" for r in ("cold", "warm")}
        for side, make, copies, _out in sides:
            for regime, c in (("cold", copies), ("warm", 1)):
                calls = calls_for(c, min_calls)
                made = make(c, calls)
                if side.source == "llama.cpp":
                    fn, calls = made.compute, made.n_mul_mats
                else:
                    made()  # warm-up: module load, cuBLAS heuristics, the allocator's blocks
                    fn, launch = graphed(made)
                    launches[(side.name, regime)] = launch
                plans.append((side, regime, c, calls, fn, made))
        torch.cuda.synchronize()
        results = profile_runs([(p[4], p[3]) for p in plans])
        for p in plans:
            if p[0].source == "llama.cpp":
                p[5].close()
        out_by_side = {side.name: out for side, _m, _c, out in sides}
        g_out = out_by_side.get("llama.cpp")
        for (side, regime, copies, calls, _fn, _made), res in zip(plans, results):
            out = out_by_side[side.name]
            row = dict(
                base,
                side=side.name,
                source=side.source,
                regime=regime,
                copies=copies,
                copies_bytes=copies
                * (wbytes if side.source != "cuBLAS" else (W16.numel() * 2 if "fp16" in side.name else W8.numel())),
                calls=calls,
                includes=side.includes,
                q8_1_sum=side.q8_1_sum,
                span_us=res.get("span_us"),
                launch=launches.get((side.name, regime)),
                activities_per_call=res.get("per_call"),
                kernels=" + ".join(dict.fromkeys(_short(n) for n in res.get("kernels", []))),
                nmse_vs_ref=None if out is None else nmse_gpu(out, ref),
                nmse_vs_llamacpp=None
                if out is None or g_out is None or side.name == "llama.cpp"
                else nmse_gpu(out, g_out),
            )
            if "error" in res:
                row.update(status="error", reason=res["error"], median_us=None)
            else:
                row.update(status="ok", reason="")
                row.update(spread(res["busy_us"]))
                row["sum_median_us"] = float(np.median(res["sum_us"]))
            rows.append(row)
        _derive(rows[-len(plans) :])
        if progress:
            best = {}
            for r in rows[-len(plans) :]:
                if r["regime"] == "cold" and r["status"] == "ok":
                    key = "ours" if r["source"] == "ours" else r["side"]
                    best[key] = min(best.get(key, 1e30), r["median_us"])
            progress(
                f"{wfmt} M={M} K={K} N={N:<5} cold median us: "
                + ", ".join(f"{k} {v:.1f}" for k, v in best.items())
                + f"  ({time.perf_counter() - t0:.1f} s)"
            )
    return rows


def _derive(rows: list[dict]) -> None:
    """Ratios within one (shape, N): against llama.cpp and cuBLAS fp16 of the same regime."""
    by = {(r["side"], r["regime"]): r for r in rows if r["status"] == "ok"}
    for r in rows:
        if r["status"] != "ok":
            continue
        g = by.get(("llama.cpp", r["regime"]))
        c = by.get(("cuBLAS fp16", r["regime"]))
        r["x_llamacpp"] = g["median_us"] / r["median_us"] if g else None
        r["x_cublas_fp16"] = c["median_us"] / r["median_us"] if c else None


def add_ceilings(rows: list[dict], ceilings: dict, datasheet: dict | None) -> None:
    """Per row: the share of the measured copy bandwidth its fewest bytes reach, and its rate
    against the measured and datasheet int8 peaks."""
    for r in rows:
        if r["status"] != "ok":
            continue
        t = r["median_us"] * 1e-6
        r["gbps"] = r["bytes"] / t / 1e9
        r["pct_copy_bw"] = 100.0 * r["gbps"] / ceilings["copy_gbps"]
        r["tops"] = r["flops"] / t / 1e12
        r["pct_int8_measured"] = 100.0 * r["tops"] / ceilings["cublaslt_int8_tops"]
        r["pct_int8_datasheet"] = 100.0 * r["tops"] / datasheet["int8_tops"] if datasheet else None


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------

COLUMNS = {
    "side": "our kernel's registry name, llama.cpp (ggml mul_mat), cuBLAS fp16 or cuBLASLt int8",
    "source": "ours, ours (fp16 A) (the fp16 step on fp16 activations: --fp16-a), llama.cpp or cuBLAS",
    "wfmt": "weight format (the cuBLAS sides: the same shape)",
    "M": "output features",
    "N": "tokens",
    "K": "reduction",
    "regime": "cold (weights rotate over copies totalling >= 4x L2) or warm (one copy)",
    "copies": "weight copies rotated over",
    "copies_bytes": "their total bytes",
    "calls": "calls timed",
    "min_us": "fastest call: time its GPU activities (CUPTI) take, overlaps counted once",
    "sum_median_us": "median call's plain sum of activity durations (counts a PDL overlap twice)",
    "q1_us": "first quartile",
    "median_us": "median call",
    "q3_us": "third quartile",
    "max_us": "slowest call",
    "mean_us": "mean",
    "iqr_us": "q3 - q1",
    "samples": "calls",
    "span_us": "first start to last end of the run / calls (launch gaps included)",
    "launch": "how the calls reach the GPU: graph (a CUDA graph's replays), eager, or ggml's graph_compute",
    "activities_per_call": "GPU activities (kernels, memsets, copies) per call",
    "kernels": "the kernels of one call",
    "includes": "what one call's time includes",
    "q8_1_sum": "Q8_1 s of the activations: d_sum_q (reference) or sum_x (ggml-cuda's)",
    "nmse_vs_ref": "NMSE against float64 A @ dequantized W (None: random int8 data)",
    "nmse_vs_llamacpp": "NMSE against llama.cpp's output on the same inputs",
    "x_llamacpp": "llama.cpp's median / this median, same regime (> 1: faster than llama.cpp)",
    "x_cublas_fp16": "cuBLAS fp16's median / this median, same regime",
    "weight_bytes": "bytes of one weight copy",
    "bytes": "fewest bytes a call moves: weights, float32 A, float32 C",
    "flops": "2 M N K",
    "gbps": "bytes / median",
    "pct_copy_bw": "gbps / measured copy bandwidth, %",
    "tops": "flops / median / 1e12",
    "pct_int8_measured": "tops / cuBLASLt int8 at 8192^3, %",
    "pct_int8_datasheet": "tops / the datasheet's dense int8 rate, %",
}


def _git_commit() -> tuple[str | None, bool | None]:
    from .bench.machine import git_commit

    return git_commit()


def write_record(rows: list[dict], header: dict, out_dir, name: str = "sweep") -> Path:
    """Write ``<name>-<time>.json`` in ``out_dir``: ``{"header", "columns", "rows"}``, with the
    benchmark's writer (``bench.results.write_json``)."""
    from .bench.results import stamp, write_json

    if not name or any(c in name for c in "/\\ "):
        raise ValueError(f"name must be a plain file name prefix, got {name!r}")
    return write_json(Path(out_dir) / f"{name}-{stamp()}.json", rows, header, COLUMNS)


def load_record(path, name: str = "sweep") -> dict:
    """``{"header", "rows", "path"}`` of a record, or of the newest ``<name>-*.json`` under a folder
    (by date folder, then time; ``tmp`` folders are scratch space and skipped)."""
    p = Path(path)
    if p.is_dir():
        found = sorted(
            (q for q in p.rglob(f"{name}-*.json") if "tmp" not in q.relative_to(p).parts),
            key=lambda q: (q.parent.name, q.name),
        )
        if not found:
            raise FileNotFoundError(f"no {name}-*.json under {p}")
        p = found[-1]
    from .bench.results import read_json

    return read_json(p)


def best_ours(rows: list[dict], wfmt: str, M: int, K: int, regime: str = "cold") -> dict[int, dict]:
    """Our fastest row per N (median) for one format, shape and regime."""
    best: dict[int, dict] = {}
    for r in rows:
        if (r["source"], r["wfmt"], r["M"], r["K"], r["regime"], r["status"]) == ("ours", wfmt, M, K, regime, "ok"):
            if r["N"] not in best or r["median_us"] < best[r["N"]]["median_us"]:
                best[r["N"]] = r
    return best


def side_rows(rows: list[dict], side: str, wfmt: str, M: int, K: int, regime: str = "cold") -> dict[int, dict]:
    return {
        r["N"]: r
        for r in rows
        if (r["side"], r["wfmt"], r["M"], r["K"], r["regime"], r["status"]) == (side, wfmt, M, K, regime, "ok")
    }


def run_to_run(
    newer: list[dict], older: list[dict], sources=("ours", "llama.cpp", "cuBLAS")
) -> dict[str, tuple[int, float, float, float]]:
    """How much two runs of the same sides differ: per source, over the cells both runs measured
    (side, format, shape, N, regime; rows with status ok), the newer median over the older, as
    (cells, 5th percentile, median, 95th percentile); sources with no common cell are left out."""
    key = lambda r: (r["side"], r["wfmt"], r["M"], r["K"], r["N"], r["regime"])  # noqa: E731
    old = {key(r): r for r in older if r["status"] == "ok"}
    out = {}
    for source in sources:
        ratios = [
            r["median_us"] / old[key(r)]["median_us"]
            for r in newer
            if r["status"] == "ok" and r["source"] == source and key(r) in old
        ]
        if ratios:
            q = np.percentile(ratios, [5, 50, 95])
            out[source] = (len(ratios), float(q[0]), float(q[1]), float(q[2]))
    return out


def as_bench_rows(rows: list[dict], regime: str = "cold") -> list[dict]:
    """The rows of one regime in the shape of ``bench``'s results (``kernel``, ``median_ms``,
    ``gflops``, ...), for the chapter-5 tables and plots: llama.cpp's rows are named
    ``ggml_cuda_<wfmt>``, cuBLAS's ``torch_cublas_fp16`` and ``torch_cublaslt_int8``."""
    out = []
    for r in rows:
        if r["regime"] != regime or r["status"] != "ok":
            continue
        name = {
            "llama.cpp": f"ggml_cuda_{r['wfmt']}",
            "cuBLAS fp16": "torch_cublas_fp16",
            "cuBLASLt int8": "torch_cublaslt_int8",
        }.get(r["side"], r["side"])
        t = r["median_us"] * 1e-6
        out.append(
            {
                "kernel": name,
                "source": r["source"],
                "device": "cuda",
                "wfmt": r["wfmt"],
                "afmt": "q8_1" if r["source"] != "cuBLAS" else ("f16" if "fp16" in r["side"] else "i8"),
                "M": r["M"],
                "N": r["N"],
                "K": r["K"],
                "status": "ok",
                "reason": "",
                "median_ms": t * 1e3,
                "min_ms": r["min_us"] * 1e-3,
                "iqr_ms": r["iqr_us"] * 1e-3,
                "reps": r["samples"],
                "gflops": r["flops"] / t / 1e9,
                "tflops": r["flops"] / t / 1e12,
                "gbps": r["bytes"] / t / 1e9,
                "bytes": r["bytes"],
                "timing": f"cupti-{regime}",
                "nmse_vs_llamacpp": r.get("nmse_vs_llamacpp"),
            }
        )
    return out


def table(rows: list[dict], wfmt: str, M: int, K: int) -> str:
    """A text table per N: llama.cpp, our best, cuBLAS; cold and warm medians; spread; limits."""
    lines = [
        f"{wfmt.upper()}  M={M} K={K}   times: median us (IQR), cold | warm",
        f"{'N':>5} {'llama.cpp':>16} {'ours (best)':>16} {'kernel':<24} {'x llama':>7} {'cuBLAS fp16':>13} "
        f"{'int8':>8} {'%copy':>6} {'NMSE vs ggml':>12} {'warm ours':>10} {'x llama':>7}",
    ]
    ours_c, ours_w = best_ours(rows, wfmt, M, K, "cold"), best_ours(rows, wfmt, M, K, "warm")
    g_c, g_w = side_rows(rows, "llama.cpp", wfmt, M, K, "cold"), side_rows(rows, "llama.cpp", wfmt, M, K, "warm")
    c16, c8 = side_rows(rows, "cuBLAS fp16", wfmt, M, K, "cold"), side_rows(rows, "cuBLASLt int8", wfmt, M, K, "cold")
    for N in sorted(ours_c):
        o, g = ours_c[N], g_c.get(N)
        ow, gw = ours_w.get(N), g_w.get(N)

        def fmt(r):
            return "-" if r is None else f"{r['median_us']:.1f} ({r['iqr_us']:.1f})"

        nm = o.get("nmse_vs_llamacpp")
        lines.append(
            f"{N:>5} {fmt(g):>16} {fmt(o):>16} {o['side'].split('q8_1_')[-1]:<24} "
            f"{(g['median_us'] / o['median_us']) if g else float('nan'):>7.2f} {fmt(c16.get(N)):>13} "
            f"{(c8[N]['median_us'] if N in c8 else float('nan')):>8.1f} {o['pct_copy_bw']:>6.1f} "
            f"{(nm if nm is not None else float('nan')):>12.2g} "
            f"{(ow['median_us'] if ow else float('nan')):>10.1f} "
            f"{(gw['median_us'] / ow['median_us']) if (gw and ow) else float('nan'):>7.2f}"
        )
    return "\n".join(lines)


def choice_report(rows: list[dict], cc, sms: int, regime: str = "cold", gpu: str | None = None) -> str:
    """What ``api.linear`` would run for each measured shape and N on this GPU (``api.pick_kernel``;
    ``gpu`` its name), next to the fastest of our kernels measured and llama.cpp, from ``rows`` of
    one run: a pick slower than the best of ours shows a threshold to move."""
    from .api import pick_cuda_kernel

    cc = tuple(cc)
    lines = [
        f"api.pick_kernel on {gpu + ', ' if gpu else ''}compute capability {cc[0]}.{cc[1]}, {sms} SMs ({regime}): median us",
        f"{'format':7s} {'M':>6s} {'K':>6s} {'N':>5s}  {'picked':<24s} {'us':>8s}  {'best of ours':<24s} "
        f"{'us':>8s} {'llama.cpp':>9s} {'x llama':>7s}",
    ]
    keys = sorted({(r["wfmt"], r["M"], r["K"], r["N"]) for r in rows if r["regime"] == regime})
    for wfmt, M, K, N in keys:
        here = [
            r
            for r in rows
            if (r["wfmt"], r["M"], r["K"], r["N"], r["regime"]) == (wfmt, M, K, N, regime) and r["status"] == "ok"
        ]
        ours = {r["side"]: r["median_us"] for r in here if r["source"] == "ours"}
        llama = next((r["median_us"] for r in here if r["side"] == "llama.cpp"), None)
        if not ours:
            continue
        try:
            pick = pick_cuda_kernel(wfmt, N, M, cc, sms, K, gpu=gpu).name
        except ValueError:
            continue
        best = min(ours, key=ours.get)
        t = ours.get(pick)

        def num(v, w=8):
            return f"{v:>{w}.1f}" if v is not None else f"{'-':>{w}s}"

        x = f"{llama / t:>7.2f}" if (t and llama) else f"{'-':>7s}"
        short = lambda name: name.split("q8_1_")[-1]  # noqa: E731
        lines.append(
            f"{wfmt:7s} {M:6d} {K:6d} {N:5d}  {short(pick):<24s} {num(t)}  {short(best):<24s} "
            f"{num(ours[best])} {num(llama, 9)} {x}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _parse_ns(text: str) -> tuple[int, ...]:
    if text == "all":
        return N_SWEEP
    try:
        ns = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise ValueError(f"--n takes 'all' or comma-separated integers, got {text!r}") from None
    if not ns or min(ns) < 1:
        raise ValueError(f"--n: batch sizes are positive integers, got {text!r}")
    return ns


def _parse_shapes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if item in SHAPES:
            out += SHAPES[item]
        elif "x" in item:
            try:
                M, K = (int(v) for v in item.split("x"))
            except ValueError:
                raise ValueError(f"--shapes: {item!r} is not MxK") from None
            if M < 1 or K < 32 or K % 256:
                raise ValueError(f"--shapes: {item!r}: M >= 1 and K a positive multiple of 256 (an LLM layer)")
            out.append((M, K))
        else:
            raise ValueError(f"--shapes: unknown {item!r}; use {tuple(SHAPES)} or MxK")
    return list(dict.fromkeys(out))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m quantgemm_kernels.measure", description=__doc__.split("\n\n")[0])
    p.add_argument("--formats", default="q4_0,q8_0", help="weight formats (default q4_0,q8_0)")
    p.add_argument("--shapes", default="llama3-8b", help=f"{tuple(SHAPES)} or MxK items (default llama3-8b)")
    p.add_argument("--n", default="all", help=f"batch sizes: 'all' = {','.join(map(str, N_SWEEP))}, or a list")
    p.add_argument("--kernels", default="", help="our kernels, {w} for the format (default: the chapter-6 kernels)")
    p.add_argument("--min-calls", type=int, default=32, help="calls per side and regime, at least (default 32)")
    p.add_argument("--no-ggml", action="store_true", help="without llama.cpp")
    p.add_argument("--no-cublas", action="store_true", help="without cuBLAS")
    p.add_argument(
        "--fp16-a",
        action="store_true",
        help="also time the fp16 step on fp16 activations, as cuBLAS fp16 gets them (source 'ours (fp16 A)')",
    )
    p.add_argument("--allow-busy", action="store_true", help="measure even when the host is busy (the record says so)")
    p.add_argument("--out", default=None, help="folder (default bench_results/<gpu>/<date>)")
    p.add_argument(
        "--name",
        default="sweep",
        help="file name prefix (default sweep; chapter 6 reads the newest "
        "sweep-*.json, chapter 5 the newest ch5-*.json)",
    )
    p.add_argument("--list", action="store_true", help="print the plan and stop (no GPU needed)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    for f in formats:
        if not any(k.wfmt == f and k.device == "cuda" and k.fused_quant for k in KERNELS.values()):
            have = sorted({k.wfmt for k in KERNELS.values() if k.device == "cuda" and k.fused_quant})
            raise SystemExit(f"--formats: {f!r} has no kernel taking float32 activations ({', '.join(have)} have)")
    try:
        shapes, ns = _parse_shapes(args.shapes), _parse_ns(args.n)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    kernels = [k for k in args.kernels.split(",") if k] or None
    if args.list:
        print("formats:", formats, "\nshapes (M, K):", shapes, "\nN:", ns, "\nours:", kernels or DEFAULT_KERNELS)
        return 0
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("measure needs a CUDA GPU (the profiler times GPU activities); use `bench` on a CPU")
    load0 = host_load()
    if load0["busy"] and not args.allow_busy:
        raise SystemExit(
            f"the host is busy (load {load0['load1']:.1f} on {load0['cpus']} CPUs, limit "
            f"{load0['limit']:.1f}): host-launched timings would move. Wait, or --allow-busy"
        )
    from . import llamacpp
    from ._build import load_extension
    from .bench.machine import ROOT, cpu_model, machine_name, machine_slug

    load_extension()
    gpu = gpu_info()
    ceil = measure_ceilings()
    ds = DATASHEET.get(gpu["name"])
    commit, dirty = _git_commit()
    header = {
        "tool": "quantgemm_kernels.measure",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_name("cuda"),
        "gpu": gpu,
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "git_commit": commit,
        "git_dirty": dirty,
        "ceilings": ceil,
        "datasheet": ds,
        "load_before": load0,
        "args": vars(args),
        "method": __doc__.split("\n\n", 1)[1].strip(),
        "ggml": None if args.no_ggml else llamacpp.available(),
    }
    print(f"# {header['machine']}; L2 {gpu['l2_bytes'] / 2**20:.0f} MiB, {gpu['sms']} SMs; commit {commit}")
    print(
        f"# copy {ceil['copy_gbps']:.0f} GB/s, cuBLAS fp16 {ceil['cublas_fp16_tflops']:.0f} TFLOP/s, "
        f"cuBLASLt int8 {ceil['cublaslt_int8_tops']:.0f} TOPS ({ceil['int8_kernel']})"
    )
    if header["ggml"] is not None:
        print(f"# {llamacpp.info_line()}")
    rows = []
    for wfmt in formats:
        for M, K in shapes:
            new = measure_shape(
                wfmt,
                M,
                K,
                ns,
                kernels=kernels,
                ggml=not args.no_ggml,
                cublas=not args.no_cublas,
                fp16_a=args.fp16_a,
                min_calls=args.min_calls,
                l2_bytes=gpu["l2_bytes"],
            )
            add_ceilings(new, ceil, ds)
            rows += new
            print(table(rows, wfmt, M, K), flush=True)
            errors = [r for r in new if r["status"] != "ok"]
            for r in errors:
                print(f"  error: {r['side']} N={r['N']} {r['regime']}: {r['reason']}")
    header["errors"] = sum(r["status"] != "ok" for r in rows)
    header["load_after"] = host_load()
    header["host_became_busy"] = header["load_after"]["busy"]
    out = Path(args.out) if args.out else ROOT / "bench_results" / machine_slug("cuda") / _dt.date.today().isoformat()
    path = write_record(rows, header, out, args.name)
    for wfmt in formats:
        for M, K in shapes:
            print(table(rows, wfmt, M, K))
    print(choice_report(rows, gpu["capability"], gpu["sms"], gpu=gpu["name"]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
