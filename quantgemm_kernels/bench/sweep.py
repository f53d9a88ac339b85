"""Timing for the course: warm-up, repeats, medians; CUDA events on a GPU, perf_counter on a CPU.

Speed is measured here and in notebook cells, never asserted by tests.

The command ``python -m quantgemm_kernels.bench`` times every registered kernel (``KERNELS``) on
llama.cpp's test-backend-ops shapes and writes a table, a CSV and a JSON file; ``--help`` lists
the options. Notebooks call :func:`run_sweep` and :func:`load_results` directly, and
:func:`measure_ceilings` for the roofline's two lines (memory bandwidth, peak matmul rate).

Two timing methods. By default our kernels are timed call by call, so every call pays the
Python and torch dispatch cost (tens of microseconds). llama.cpp's rows (``--ggml``) run the
same ``mul_mat`` many times in one graph, as ``test-backend-ops perf`` does. With ``--ggml``
(or ``--batched``) our kernels are timed the same way: R back-to-back calls per sample, R being
the repeat count test-backend-ops would use for the shape, time / R; on a GPU the launches then
overlap their host-side cost with the previous kernel, as ggml's graph does. The ``batch``
column of every row says which method produced it.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import fnmatch
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import formats as F
from ..registry import KERNELS, Kernel

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Timing:
    median_s: float
    min_s: float
    reps: int


def machine_name(device: str = "cpu") -> str:
    """A short, honest description of what produced a number: the GPU's name, or the CPU's."""
    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, torch {torch.__version__})"
    return cpu_name()


def cpu_name(threads: int | None = None) -> str:
    """The CPU behind a CPU number, never the GPU: model, the threads in use (torch's count unless
    ``threads`` is given) and torch's version. Title CPU figures and tables with it."""
    n = torch.get_num_threads() if threads is None else threads
    return f"{_cpu_model()}, {n} thread{'' if n == 1 else 's'} (torch {torch.__version__})"


def _cores_in_cpuinfo(text: str, allowed=None) -> int:
    """Distinct (physical id, core id) pairs of the processors in ``text`` (``/proc/cpuinfo``) that
    ``allowed`` holds (all when None); 0 when the file does not say which core a processor is."""
    cores = set()
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "processor" not in fields or "core id" not in fields:
            return 0
        if allowed is None or int(fields["processor"]) in allowed:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return len(cores)


def physical_cores() -> int:
    """Physical cores this process may run on (hyperthread siblings count once): the CPU thread
    count that CPU timings use. From ``/proc/cpuinfo``, else ``lscpu``, else ``os.cpu_count()``;
    at least 1."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    n = 0
    try:
        with open("/proc/cpuinfo") as f:
            n = _cores_in_cpuinfo(f.read(), allowed)
    except (OSError, ValueError):
        pass
    if not n:
        try:
            out = subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET"], capture_output=True, text=True,
                                 timeout=10).stdout
            rows = [line.split(",") for line in out.splitlines() if line and not line.startswith("#")]
            n = len({(r[2], r[1]) for r in rows if allowed is None or int(r[0]) in allowed})
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            n = 0
    if not n:
        n = len(allowed) if allowed else (os.cpu_count() or 1)
    return max(1, n)


#: Load per CPU of the host, beyond the timing's own threads, above which :func:`host_load` says busy.
BUSY_LOAD_PER_CPU = 0.5


def host_load(threads: int | None = None) -> dict:
    """How busy the host is before a CPU timing: ``load_1min`` (the 1-minute load average),
    ``cpus`` (``os.cpu_count()``), ``threads`` (the timing's, torch's count unless given) and
    ``busy``. Print it next to CPU times: a busy host makes them slower than the CPU is.

    The rule: the load average counts the runnable threads of the whole host, this notebook's own
    recent work included (up to ``threads``). So the host is busy when the load exceeds
    ``threads + BUSY_LOAD_PER_CPU * cpus``: more than half a CPU per CPU of other work, which then
    shares CPUs with the timing. The load average is not available everywhere (``load_1min`` None,
    ``busy`` False then).
    """
    n = torch.get_num_threads() if threads is None else threads
    cpus = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    busy = load is not None and load > n + BUSY_LOAD_PER_CPU * cpus
    return {"load_1min": None if load is None else round(load, 2), "cpus": cpus, "threads": n, "busy": busy}


def _cpu_model() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:60] or "unknown"


def machine_slug(device: str = "cpu") -> str:
    """A folder name for results: the GPU's name, or the CPU model and thread count."""
    if device == "cuda" and torch.cuda.is_available():
        return _slug(torch.cuda.get_device_name())
    return f"{_slug(_cpu_model())}-{torch.get_num_threads()}t"


def time_samples(fn, device: str = "cpu", warmup: int = 3, reps: int = 10, min_time_s: float = 0.0,
                 batch: int = 1, graph: bool = False) -> list[float]:
    """Every individual time (seconds) of ``fn()``: warm-up calls first, then at least ``reps``
    samples and at least ``min_time_s`` seconds (at most 10,000); CUDA events on a GPU,
    perf_counter on a CPU. With ``batch`` > 1 a sample is ``batch`` back-to-back calls, and its
    time is divided by ``batch`` (throughput, as test-backend-ops measures).

    ``graph`` (CUDA): the ``batch`` calls are captured once into a CUDA graph and a sample is one
    replay, so the time is the GPU's alone, without Python's and the dispatcher's cost per call
    (llama.cpp's CUDA backend replays graphs too). ``fn`` must not synchronize (our kernels with
    fused activation quantization qualify; ``gemm()`` on a Q8_1 kernel checks A on the host and
    does not).
    """
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    if device == "cuda" and graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(batch):
                fn()
        g.replay()
        torch.cuda.synchronize()
        fn = g.replay
        batch_calls, batch = batch, 1
    else:
        batch_calls = batch
    times = []
    t_start = time.perf_counter()
    while len(times) < reps or (time.perf_counter() - t_start) < min_time_s:
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / batch_calls)
        else:
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            times.append((time.perf_counter() - t0) / batch)
        if len(times) >= 10_000:
            break
    return times


def time_callable(fn, device: str = "cpu", warmup: int = 3, reps: int = 10, min_time_s: float = 0.0,
                  batch: int = 1, graph: bool = False) -> Timing:
    """Median time of ``fn()``. Repeats at least ``reps`` times and until ``min_time_s`` has passed
    (``batch``, ``graph``: see :func:`time_samples`)."""
    times = time_samples(fn, device, warmup, reps, min_time_s, batch, graph)
    return Timing(statistics.median(times), min(times), len(times))


def bytes_moved(k: Kernel, M: int, N: int, K: int) -> int:
    """The fewest bytes a kernel must move: weights, activations (as the kernel reads them) and C."""
    wbytes = M * K * 4 if k.wfmt == "f32" else M * (K // F.QK) * F.BLOCK_BYTES[k.wfmt]
    abytes = N * K * 4 if k.afmt == "f32" or k.fused_quant else N * (K // F.QK) * F.BLOCK_BYTES[k.afmt]
    return wbytes + abytes + N * M * 4


def _make_weights(M: int, K: int, device: str, seed: int = 0) -> torch.Tensor:
    return torch.randn(M, K, generator=torch.Generator().manual_seed(seed)).to(device)


def _make_activations(N: int, K: int, device: str, seed: int = 0) -> torch.Tensor:
    # Its own generator: the weights of a shape do not depend on N, so a sweep over N reuses them.
    return torch.randn(N, K, generator=torch.Generator().manual_seed(seed + 1)).to(device)


def _kernel_call(k: Kernel, A: torch.Tensor, Wk: torch.Tensor, include_activation_quant: bool):
    """A no-argument callable running kernel ``k`` once; ``Wk`` is already in the weight format."""
    from .. import api

    if k.afmt == "f32" or k.fused_quant or include_activation_quant:
        return lambda: api.gemm(A, Wk, k)
    Aq = api.quantize(A, k.afmt, q8_1_sum=k.q8_1_sum)
    return lambda: api.gemm_quantized(Aq, Wk, k)


def _result(k: Kernel, M: int, N: int, K: int, t: Timing) -> dict:
    flops = 2.0 * M * N * K
    nbytes = bytes_moved(k, M, N, K)
    return {"kernel": k.name, "device": k.device, "M": M, "N": N, "K": K, "median_ms": t.median_s * 1e3,
            "min_ms": t.min_s * 1e3, "reps": t.reps, "gflops": flops / t.median_s / 1e9,
            "tflops": flops / t.median_s / 1e12, "gbps": nbytes / t.median_s / 1e9, "bytes": nbytes}


def bench_kernel(kernel, M: int, N: int, K: int, warmup: int = 3, reps: int = 10, seed: int = 0,
                 include_activation_quant: bool = True) -> dict:
    """Time one kernel on one shape. Returns a dict with the median time, GFLOP/s and GB/s."""
    from .. import api

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    A, W = _make_activations(N, K, k.device, seed), _make_weights(M, K, k.device, seed)
    Wk = W if k.wfmt == "f32" else api.quantize(W, k.wfmt)
    t = time_callable(_kernel_call(k, A, Wk, include_activation_quant), k.device, warmup, reps)
    return _result(k, M, N, K, t)


# ---------------------------------------------------------------------------------------------
# Shapes and kernels to sweep
# ---------------------------------------------------------------------------------------------

#: Named shape sets, (M, N, K) = llama.cpp's (m, n, k): M output features, N tokens, K reduction.
SHAPE_SETS: dict[str, list[tuple[int, int, int]]] = {
    # test-backend-ops perf's MUL_MAT cases (Llama 3 8B's FFN down projection, k = 14336):
    # n = 1..5, 8 are decode batches (the GEMV side of the switch), n = 512 a prefill batch.
    "llama": [(4096, n, 14336) for n in (1, 2, 3, 4, 5, 8, 512)],
    "tutorial": [(4096, 512, 4096)],  # the square-ish shape of the CUDA GEMM tutorials
    "small": [(1024, n, 1024) for n in (1, 8, 64)],  # quick runs on a laptop CPU
}

_SHAPE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def parse_shapes(spec) -> list[tuple[int, int, int]]:
    """Shapes from set names and ``MxNxK`` items, comma-separated (``"llama,1024x8x1024"``),
    or from a list of names, items and (M, N, K) tuples. Duplicates are dropped, order kept."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[tuple[int, int, int]] = []
    for item in items:
        if isinstance(item, (tuple, list)):
            found = [tuple(int(v) for v in item)]
        elif item.strip() in SHAPE_SETS:
            found = SHAPE_SETS[item.strip()]
        elif m := _SHAPE_RE.match(item.strip()):
            found = [tuple(int(v) for v in m.groups())]
        else:
            raise ValueError(f"unknown shape {item!r}: use a set name {tuple(SHAPE_SETS)} or MxNxK (e.g. 4096x1x14336)")
        for s in found:
            if len(s) != 3 or min(s) < 1:
                raise ValueError(f"a shape is three positive integers (M, N, K), got {s}")
            if s[2] % F.QK:
                raise ValueError(f"K must be a multiple of {F.QK}, got shape {s}")
            if s not in out:
                out.append(s)
    return out


def ggml_entries(device: str = "cpu") -> list[Kernel]:
    """llama.cpp's own mul_mat as sweep entries ``ggml_<device>_<wfmt>``, with the activation
    format ggml quantizes to itself (CPU: the type traits' vec_dot_type, Q8_0; CUDA: Q8_1)."""
    from .. import llamacpp

    out = []
    for wfmt in llamacpp.WEIGHT_FORMATS:
        if wfmt == "f32":
            afmt = "f32"
        elif device == "cpu":
            try:
                afmt = llamacpp.ggml_vec_dot_type(wfmt)
            except llamacpp.GgmlUnavailable:
                afmt = "q8_0"  # what every ggml CPU backend since 2023 uses for Q4_0 and Q8_0
        else:
            afmt = "q8_1"
        out.append(Kernel(f"ggml_{device}_{wfmt}", device, wfmt, afmt, 5, "llama.cpp's ggml mul_mat"))
    return out


def baseline_name(k: Kernel) -> str:
    """The naive kernel a row's speedup is measured against: same device and formats. llama.cpp's
    rows use our naive kernel with the same weights and Q8_1 activations (the nearest we have)."""
    afmt = "q8_1" if k.name.startswith("ggml_") and k.wfmt != "f32" else k.afmt
    return f"{k.device}_{k.wfmt}_{afmt}_naive"


def select_kernels(device: str | None = None, patterns=None, ggml: bool = False, baseline: bool = True) -> list[Kernel]:
    """Registered kernels on ``device`` ("cpu", "cuda" or None for both) whose names match any of
    the glob ``patterns`` (a comma-separated string or a list), in teaching order; with
    ``ggml=True`` also llama.cpp's mul_mat entries; with ``baseline=True`` the naive kernel each
    speedup needs is added even where the patterns leave it out."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p]
    candidates = [k for k in KERNELS.values() if device in (None, "all", k.device)]
    if ggml:
        for dev in ("cpu", "cuda"):
            if device in (None, "all", dev):
                candidates += ggml_entries(dev)
    chosen = [k for k in candidates if not patterns or any(fnmatch.fnmatchcase(k.name, p) for p in patterns)]
    if patterns and not chosen:
        raise ValueError(f"no kernel matches {patterns}; the names are: {', '.join(k.name for k in candidates)}")
    if baseline:
        names = {k.name for k in chosen}
        extra = [KERNELS[b] for b in dict.fromkeys(baseline_name(k) for k in chosen) if b in KERNELS and b not in names]
        order = {name: i for i, name in enumerate(KERNELS)}
        chosen = sorted(extra + chosen, key=lambda k: (k.name.startswith("ggml_"), order.get(k.name, 0)))
    return chosen


# ---------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------

_PROBE_M = 64  # rows of W in the probe runs that estimate a slow kernel's time
_PROBE_FLOPS = 2e8  # below this a call is fast even for a naive kernel: no probe
_REP_BUDGET_S = 5.0  # slow calls get fewer repeats (at least 3) to keep one combination near this


def _cuda_ready() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA GPU here"
    from .. import api

    if not api.cuda_kernels_built():
        return False, "the CUDA kernels are not built (no nvcc or a CPU-only torch)"
    return True, ""


def _estimate_s(k: Kernel, A, Wk, M: int, N: int, K: int, include_activation_quant: bool, max_seconds: float):
    """Estimated seconds of one call, from one or two calls on the first 64 (then 128) rows of W.

    Time grows linearly in M (each output column is independent), plus a part that does not
    (quantizing A, launching threads). One probe scaled by M/64 overestimates; when that
    estimate is over the limit, a second probe at 128 rows separates the two parts.
    """
    if 2.0 * M * N * K <= _PROBE_FLOPS or M <= 2 * _PROBE_M:
        return None

    def probe(m):
        fn = _kernel_call(k, A, Wk[:m], include_activation_quant)
        return time_callable(fn, k.device, warmup=0, reps=2).min_s

    t1 = probe(_PROBE_M)
    upper = t1 * M / _PROBE_M
    if upper <= max_seconds or t1 > max_seconds:
        return upper
    t2 = probe(2 * _PROBE_M)
    return t1 + max(t2 - t1, 0.0) * (M - _PROBE_M) / _PROBE_M


def _row_base(k: Kernel, M: int, N: int, K: int, include_activation_quant: bool) -> dict:
    return {"kernel": k.name, "source": "llama.cpp" if k.name.startswith("ggml_") else "ours",
            "device": k.device, "wfmt": k.wfmt, "afmt": k.afmt, "chapter": k.chapter, "M": M, "N": N, "K": K,
            "status": "ok", "reason": "", "median_ms": None, "min_ms": None, "reps": 0, "tflops": None,
            "gflops": None, "gbps": None, "bytes": bytes_moved(k, M, N, K), "est_ms": None,
            "act_quant_timed": k.afmt != "f32" and (include_activation_quant or k.name.startswith("ggml_")),
            "baseline": "", "speedup_vs_naive": None, "speedup_basis": "",
            "batch": 1,  # calls per timed sample (1: call by call; >1: test-backend-ops style)
            "cache": "warm" if k.device == "cuda" else "n/a", "copies": 1,
            "timing": "ggml" if k.name.startswith("ggml_") else ""}  # events, cuda-graph, perf_counter


def _time_ggml(k: Kernel, A, W, M, N, K, warmup, reps):
    from .. import llamacpp

    backend = "cuda" if k.device == "cuda" else "cpu"
    s = llamacpp.time_ggml_mul_mat(W, A, k.wfmt, backend=backend, warmup=max(1, warmup), computes=max(1, reps))
    return Timing(s, s, max(1, reps))


def run_sweep(kernels=None, shapes="small", *, warmup: int = 2, reps: int = 10, max_seconds: float = 1.0,
              include_activation_quant: bool = True, seed: int = 0, progress: bool = True,
              baseline: bool = True, ggml: bool = False, batched: bool | None = None,
              graph: bool = False, cache: str = "warm") -> list[dict]:
    """Time kernels over shapes; one dict per (kernel, shape), skipped ones included.

    ``kernels``: names, :class:`Kernel` objects, glob patterns, or None for all registered ones
    (see :func:`select_kernels`; ``ggml=True`` adds llama.cpp's mul_mat). ``shapes``: see
    :func:`parse_shapes`. A combination is skipped, with the reason in the row, when its device is
    missing or one call is estimated to take longer than ``max_seconds``. Kernels with 8-bit
    activations are timed with the activation quantization included unless
    ``include_activation_quant=False`` (llama.cpp's mul_mat always includes it). ``batched``
    (default: on with ``ggml`` or ``graph``) times our kernels as test-backend-ops times ggml: R calls
    back to back per sample (see the module docstring). ``graph``: CUDA kernels that take float32
    activations are timed as CUDA-graph replays of those calls (:func:`time_samples`); the row's
    ``timing`` says how each row was timed.

    ``cache`` (CUDA kernels): ``"warm"``, every call on the same weights (they stay in the L2 when
    they fit), or ``"cold"``, call i on weight copy i mod C, the C copies together at least 4x the
    L2 (``measure.copies_for``), as a model's layers are read; every timed sample is then a whole
    number of rotations. The ``cache`` and ``copies`` columns say which.
    """
    if cache not in ("warm", "cold"):
        raise ValueError(f"cache must be 'warm' or 'cold', got {cache!r}")
    if batched is None:
        batched = ggml or graph or any(getattr(k, "name", str(k)).startswith("ggml_") for k in (kernels or []))
    from .. import api

    if kernels is None or isinstance(kernels, str):
        ks = select_kernels(None, kernels, ggml=ggml, baseline=baseline)
    else:
        ks = []
        for item in kernels:  # Kernel objects, registry names, ggml_* names or glob patterns
            if isinstance(item, Kernel):
                ks.append(item)
            elif item in KERNELS:
                ks.append(KERNELS[item])
            else:
                ks += select_kernels(None, [item], ggml=True, baseline=False)
        ks = list({k.name: k for k in ks}.values())
        if baseline:
            names = {k.name for k in ks}
            ks = [KERNELS[b] for b in dict.fromkeys(baseline_name(k) for k in ks)
                  if b in KERNELS and b not in names] + ks
        if ggml:
            ks += [e for dev in ("cpu", "cuda") for e in ggml_entries(dev) if e.name not in {k.name for k in ks}]
    shape_list = parse_shapes(shapes)
    device_ok = {"cpu": (True, "")}
    if any(k.device == "cuda" for k in ks):
        device_ok["cuda"] = _cuda_ready()
    if any(k.name.startswith("ggml_") for k in ks):
        from .. import llamacpp

        info = llamacpp.available()
        ggml_ok = {"cpu": (info["cpu_backend"], f"ggml CPU backend unavailable: {info['error']}"),
                   "cuda": (info["cuda_backend"], "this ggml has no CUDA backend (ggml-py built with -DGGML_CUDA=on has)")}
    if any(ok for ok, _ in device_ok.values()):
        from .._build import load_extension

        load_extension()  # compile now, not inside the first timed call

    rows: list[dict] = []
    total, done = len(ks) * len(shape_list), 0
    inputs: dict = {}  # tensors shared by the kernels of a shape
    for M, N, K in shape_list:
        for k in ks:
            done += 1
            row = _row_base(k, M, N, K, include_activation_quant)
            rows.append(row)
            label = f"[{done}/{total}] {k.name:<26} M={M} N={N} K={K}"
            ok, why = device_ok.get(k.device, (False, f"unknown device {k.device}"))
            if ok and k.name.startswith("ggml_"):
                ok, why = ggml_ok[k.device]
            if ok and k.device == "cuda" and not k.runs_on(torch.cuda.get_device_capability()):
                ok, why = False, f"needs compute capability {k.min_sm} to {k.max_sm}"
            if not ok:
                row.update(status="skipped", reason=why)
                if progress:
                    print(f"{label}: skipped ({why})", flush=True)
                continue
            try:
                # Inputs are shared by every kernel of a shape (the same numbers in every row),
                # and the weights by every shape with the same M and K.
                inputs = {c: v for c, v in inputs.items() if c[:3] in (("A", N, K), ("W", M, K))}
                akey, fkey, wkey = ("A", N, K, k.device), ("W", M, K, k.device, "f32"), ("W", M, K, k.device, k.wfmt)
                if akey not in inputs:
                    inputs[akey] = _make_activations(N, K, k.device, seed)
                if fkey not in inputs:
                    inputs[fkey] = _make_weights(M, K, k.device, seed)
                if wkey not in inputs:
                    inputs[wkey] = api.quantize(inputs[fkey], k.wfmt)
                A, Wk = inputs[akey], inputs[wkey]
                if k.name.startswith("ggml_"):
                    from ..llamacpp import perf_repeats

                    row["batch"] = perf_repeats(M, N, K, "cuda" if k.device == "cuda" else "cpu")
                    t = _time_ggml(k, A.cpu().numpy(), Wk.cpu().numpy(), M, N, K, warmup, reps)
                else:
                    est = _estimate_s(k, A, Wk, M, N, K, include_activation_quant, max_seconds)
                    row["est_ms"] = None if est is None else est * 1e3
                    if est is not None and est > max_seconds:
                        row.update(status="skipped",
                                   reason=f"estimated {est:.3g} s per call > --max-seconds {max_seconds:g}")
                        if progress:
                            print(f"{label}: skipped ({row['reason']})", flush=True)
                        continue
                    if batched:
                        from ..llamacpp import perf_repeats

                        row["batch"] = perf_repeats(M, N, K, "cuda" if k.device == "cuda" else "cpu")
                    fn = _kernel_call(k, A, Wk, include_activation_quant)
                    use_graph = graph and k.device == "cuda" and (k.afmt == "f32" or k.fused_quant)
                    if cache == "cold" and k.device == "cuda":
                        # every call reads the next copy: a copy comes back only after the others
                        # have passed through the L2
                        from ..measure import copies_for

                        l2 = torch.cuda.get_device_properties(A.device).L2_cache_size
                        ws = [Wk] + [Wk.clone() for _ in range(copies_for(Wk.numel() * Wk.element_size(), l2) - 1)]
                        calls = [_kernel_call(k, A, w, include_activation_quant) for w in ws]
                        turn = itertools.cycle(calls)
                        fn = lambda: next(turn)()  # noqa: E731 - the next copy on every call
                        row["copies"] = len(ws)
                        if use_graph:  # a replayed graph repeats its captured calls: capture whole rotations
                            row["batch"] = len(ws) * -(-row["batch"] // len(ws))
                    row["cache"] = cache if k.device == "cuda" else "n/a"
                    per_sample = (est or 0.0) * row["batch"]
                    n = reps if est is None else min(reps, max(3, int(_REP_BUDGET_S / max(per_sample, 1e-9))))
                    row["timing"] = "cuda-graph" if use_graph else "events" if k.device == "cuda" else "perf_counter"
                    t = time_callable(fn, k.device, warmup=warmup if est is None or est < 0.5 else 1, reps=n,
                                      batch=row["batch"], graph=use_graph)
            except Exception as e:  # noqa: BLE001 - one broken kernel must not end a long sweep
                row.update(status="error", reason=f"{type(e).__name__}: {e}".splitlines()[0][:200])
                if progress:
                    print(f"{label}: ERROR {row['reason']}", flush=True)
                continue
            res = _result(k, M, N, K, t)
            row.update({f: res[f] for f in ("median_ms", "min_ms", "reps", "gflops", "tflops", "gbps")})
            if progress:
                print(f"{label}: {row['median_ms']:.4g} ms, {row['tflops']:.3g} TFLOPS, {row['gbps']:.3g} GB/s",
                      flush=True)
    _add_speedups(rows)
    return rows


def _add_speedups(rows: list[dict]) -> None:
    """speedup_vs_naive = naive time / this time, the naive time measured or, where the naive
    kernel was skipped as too slow, its estimate (``speedup_basis`` says which)."""
    by_key = {(r["kernel"], r["M"], r["N"], r["K"]): r for r in rows}
    for r in rows:
        if r["status"] != "ok":
            continue
        k = KERNELS.get(r["kernel"]) or Kernel(r["kernel"], r["device"], r["wfmt"], r["afmt"], r["chapter"], "")
        b = by_key.get((baseline_name(k), r["M"], r["N"], r["K"]))
        if b is None:
            continue
        r["baseline"] = b["kernel"]
        if b["status"] == "ok":
            r["speedup_vs_naive"], r["speedup_basis"] = b["median_ms"] / r["median_ms"], "measured"
        elif b["est_ms"]:
            r["speedup_vs_naive"], r["speedup_basis"] = b["est_ms"] / r["median_ms"], "estimated"


# ---------------------------------------------------------------------------------------------
# Ceilings for the roofline
# ---------------------------------------------------------------------------------------------

def measure_ceilings(device: str = "cpu", copy_mb: float | None = None, matmul_n: int | None = None,
                     reps: int = 5, cache_copy_mb: float | None = 16.0) -> dict:
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
    out = {"device": device, "machine": machine_name(device), "copy_mb": copy_mb, "cache_copy_mb": cache_copy_mb,
           "matmul_n": n, "matmul_tflops": {}}

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


# ---------------------------------------------------------------------------------------------
# Results on disk
# ---------------------------------------------------------------------------------------------

COLUMNS = {
    "kernel": "registry name (ggml_<device>_<wfmt>: llama.cpp's own mul_mat)",
    "source": "ours or llama.cpp",
    "device": "cpu or cuda", "wfmt": "weight format", "afmt": "activation format the kernel reads",
    "chapter": "chapter that introduces the kernel",
    "M": "output features (llama.cpp m)", "N": "tokens (n)", "K": "reduction (k)",
    "status": "ok, skipped or error", "reason": "why skipped or failed",
    "median_ms": "median time of one call", "min_ms": "fastest call", "reps": "timed samples",
    "batch": "calls per sample: 1 = call by call; R = R back-to-back calls (ggml: R mul_mat nodes in one graph)",
    "timing": "events (CUDA events around Python calls), cuda-graph (replay of captured calls), perf_counter (CPU), ggml",
    "cache": "CUDA: warm (the same weights every call) or cold (rotation over copies >= 4x the L2); n/a on a CPU",
    "copies": "weight copies rotated over (1: warm)",
    "tflops": "2*M*N*K / median time / 1e12", "gflops": "the same in GFLOP/s",
    "gbps": "bytes / median time / 1e9", "bytes": "fewest bytes a call must move (weights, activations as read, C)",
    "est_ms": "estimated time of one call from probe runs (slow kernels only)",
    "act_quant_timed": "the activations' quantization is inside the timed region",
    "baseline": "naive kernel the speedup is measured against",
    "speedup_vs_naive": "baseline time / this time", "speedup_basis": "measured or estimated baseline time",
}


def _git_commit() -> tuple[str | None, bool | None]:
    """HEAD's hash and whether tracked files differ from it; where the tree is a copy without git
    history (a remote GPU machine), ``$QUANTGEMM_GIT_COMMIT`` names the commit instead (and wins
    when set: such a copy may carry a stale .git)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)

    if os.environ.get("QUANTGEMM_GIT_COMMIT"):  # set explicitly: a copied tree's git may be stale
        return os.environ["QUANTGEMM_GIT_COMMIT"], None
    try:
        head = git("rev-parse", "HEAD")
        commit = head.stdout.strip()
        if head.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", commit):
            return commit, bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("QUANTGEMM_GIT_COMMIT") or None, None


def make_header(device: str = "cpu", **extra) -> dict:
    """What produced the numbers: machine, date, git commit, torch, threads (plus ``extra``)."""
    commit, dirty = _git_commit()
    now = _dt.datetime.now().astimezone()
    header = {"tool": "quantgemm_kernels.bench", "machine": machine_name(device),
              "machine_slug": machine_slug(device), "cpu": _cpu_model(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "date": now.isoformat(timespec="seconds"), "git_commit": commit, "git_dirty": dirty,
              "torch": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads(),
              "python": platform.python_version(), "platform": platform.platform(),
              # other work on the machine slows a CPU run: the load before it started says how much
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
              "timing": "median over samples after warm-up; CUDA events on a GPU, perf_counter on a CPU; "
                        "our rows: a sample is `batch` back-to-back calls, time / batch (batch 1: call by call); "
                        "llama.cpp rows: test-backend-ops style (one graph of repeated mul_mat nodes, time / repeats)"}
    header.update(extra)
    return header


def write_results(rows: list[dict], header: dict, out_dir) -> tuple[Path, Path]:
    """Write ``results-<time>.csv`` (header as ``# key: value`` lines) and ``.json`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "results-" + _dt.datetime.now().strftime("%H%M%S")
    csv_path, json_path = out / f"{stem}.csv", out / f"{stem}.json"
    with open(json_path, "w") as f:
        json.dump({"header": header, "columns": COLUMNS, "rows": rows}, f, indent=1, default=str)
        f.write("\n")
    with open(csv_path, "w", newline="") as f:
        for key, value in header.items():
            f.write(f"# {key}: {json.dumps(value, default=str)}\n")
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in COLUMNS})
    return csv_path, json_path


def _csv_value(text: str):
    if text == "":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def load_results(path) -> dict:
    """``{"header", "rows"}`` from a results JSON or CSV file, or from a folder (its newest JSON,
    searched recursively). For a table: ``pandas.DataFrame(load_results(p)["rows"])``."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.rglob("*.json"), key=lambda q: q.stat().st_mtime)
        if not found:
            raise FileNotFoundError(f"no results .json under {p}")
        p = found[-1]
    if p.suffix == ".json":
        with open(p) as f:
            data = json.load(f)
        return {"header": data["header"], "rows": data["rows"], "path": str(p)}
    header, lines = {}, []
    with open(p, newline="") as f:
        for line in f:
            if line.startswith("# ") and ": " in line and not lines:
                key, value = line[2:].rstrip("\n").split(": ", 1)
                try:
                    header[key] = json.loads(value)
                except json.JSONDecodeError:
                    header[key] = value
            else:
                lines.append(line)
    rows = [{k: _csv_value(v) for k, v in r.items()} for r in csv.DictReader(lines)]
    return {"header": header, "rows": rows, "path": str(p)}


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table, one line per (kernel, shape)."""
    head = f"{'kernel':<26} {'M':>5} {'N':>4} {'K':>6} {'ms':>10} {'TFLOPS':>8} {'GB/s':>7} {'x naive':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = f"{r['kernel']:<26} {r['M']:>5} {r['N']:>4} {r['K']:>6}"
        if r["status"] != "ok":
            lines.append(f"{shape}   {r['status']}: {r['reason']}")
            continue
        sp = r["speedup_vs_naive"]
        sp_txt = "" if sp is None else f"{sp:.3g}" + ("~" if r["speedup_basis"] == "estimated" else "")
        lines.append(f"{shape} {r['median_ms']:>10.4g} {r['tflops']:>8.3g} {r['gbps']:>7.3g} {sp_txt:>8}")
    return "\n".join(lines)


def cold_warm_table(cold: list[dict], warm: list[dict]) -> str:
    """Per (kernel, shape) timed both ways: the cold and the warm median and their ratio."""
    key = lambda r: (r["kernel"], r["M"], r["N"], r["K"])  # noqa: E731
    w = {key(r): r for r in warm if r["status"] == "ok"}
    head = f"{'kernel':26s} {'M':>5s} {'N':>4s} {'K':>6s} {'cold ms':>10s} {'warm ms':>10s} {'cold/warm':>9s}"
    lines = [head, "-" * len(head)]
    for r in cold:
        if r["status"] == "ok" and key(r) in w:
            lines.append(f"{r['kernel']:26s} {r['M']:5d} {r['N']:4d} {r['K']:6d} {r['median_ms']:10.4g} "
                         f"{w[key(r)]['median_ms']:10.4g} {r['median_ms'] / w[key(r)]['median_ms']:9.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m quantgemm_kernels.bench",
        description="Time the registered GEMM kernels on llama.cpp's test-backend-ops shapes "
                    "(C [N, M] = A [N, K] @ W [M, K]^T; M, N, K = llama.cpp's m, n, k).")
    p.add_argument("--device", choices=("all", "cpu", "cuda"), default="all",
                   help="kernels of this device (default: all; CUDA ones skip without a GPU)")
    p.add_argument("--kernels", default="", help="comma-separated globs on kernel names, e.g. 'cpu_q4_0_*,*_simd'")
    p.add_argument("--shapes", default="llama,tutorial",
                   help=f"comma-separated set names {tuple(SHAPE_SETS)} and MxNxK items (default: llama,tutorial)")
    p.add_argument("--ggml", action="store_true", help="also time llama.cpp's own mul_mat (ggml_<device>_<wfmt>)")
    p.add_argument("--no-baseline", action="store_true", help="do not add the naive kernels speedups need")
    p.add_argument("--exclude-act-quant", action="store_true",
                   help="time 8-bit-activation kernels on pre-quantized activations (default: quantization included)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=10, help="timed calls per combination (fewer for slow ones, at least 3)")
    p.add_argument("--max-seconds", type=float, default=1.0,
                   help="skip a combination whose single call is estimated to take longer (default 1.0)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads; ggml uses the same)")
    p.add_argument("--batched", action="store_true",
                   help="time our kernels as R back-to-back calls per sample, as test-backend-ops times ggml "
                        "(on by default with --ggml and --graph)")
    p.add_argument("--graph", action="store_true",
                   help="CUDA kernels taking float32 activations: time CUDA-graph replays of the batched calls "
                        "(GPU time without Python's per-call cost; implies --batched: a graph of one call "
                        "would time the graph launch)")
    p.add_argument("--cache", choices=("warm", "cold"), default="warm",
                   help="CUDA kernels: warm (same weights every call) or cold (rotate over copies >= 4x L2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="results folder (default bench_results/<machine-slug>/<date>)")
    p.add_argument("--no-ceilings", action="store_true", help="skip measuring copy bandwidth and peak matmul rate")
    p.add_argument("--list", action="store_true", help="list the kernels and shapes that would run, then stop")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = None if args.device == "all" else args.device
    kernels = select_kernels(device, args.kernels or None, ggml=args.ggml, baseline=not args.no_baseline)
    shapes = parse_shapes(args.shapes)
    if args.list:
        print("kernels:", ", ".join(k.name for k in kernels))
        print("shapes (M, N, K):", ", ".join(f"{m}x{n}x{k}" for m, n, k in shapes))
        return 0
    main_device = "cuda" if torch.cuda.is_available() and any(k.device == "cuda" for k in kernels) else "cpu"
    include_aq = not args.exclude_act_quant
    extra = {"activation_quant_timed": include_aq, "args": vars(args),
             "shapes": [list(s) for s in shapes], "kernels": [k.name for k in kernels]}
    if args.ggml:
        from .. import llamacpp

        extra["ggml"] = llamacpp.available()
    header = make_header(main_device, **extra)
    print(f"# machine: {header['machine']}\n# date: {header['date']}   commit: {header['git_commit']}"
          f"{' (uncommitted changes)' if header['git_dirty'] else ''}\n# torch {header['torch']}, "
          f"{header['threads']} CPU threads" + (f"\n# {llamacpp.info_line()}" if args.ggml else ""))
    print("# 8-bit-activation kernels: quantizing the activations is " +
          ("INSIDE the timed region (--exclude-act-quant to leave it out)" if include_aq else
           "OUTSIDE the timed region (llama.cpp's rows always include it)"), flush=True)
    if not args.no_ceilings:
        header["ceilings"] = {}
        for dev in sorted({k.device for k in kernels}):
            if dev == "cuda" and not torch.cuda.is_available():
                continue
            c = measure_ceilings(dev)
            header["ceilings"][dev] = c
            rates = ", ".join(f"{name} {v:.3g}" for name, v in c["matmul_tflops"].items())
            print(f"# {dev} ceilings: copy {c['copy_gbps']:.3g} GB/s ({c['copy_mb']:g} MB), "
                  f"{c.get('copy_gbps_cache', float('nan')):.3g} GB/s ({c['cache_copy_mb']:g} MB, in cache); "
                  f"matmul TFLOPS: {rates}", flush=True)
    rows = run_sweep(kernels, shapes, warmup=args.warmup, reps=args.reps, max_seconds=args.max_seconds,
                     include_activation_quant=include_aq, seed=args.seed, progress=not args.quiet, baseline=False,
                     batched=args.batched or args.ggml or args.graph, graph=args.graph, cache=args.cache)
    print()
    print(format_table(rows))
    out = Path(args.out) if args.out else ROOT / "bench_results" / header["machine_slug"] / _dt.date.today().isoformat()
    csv_path, json_path = write_results(rows, header, out)
    print(f"\nwrote {csv_path}\n      {json_path}")
    print("(~ marks a speedup over an estimated naive time; the naive kernel was too slow to run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

