"""The sweep: every selected entry on every shape, one result row each, skipped ones included.

:func:`run_sweep` is what ``python -m quantgemm_kernels.bench`` and the notebooks call;
:func:`bench_kernel` times one kernel on one shape. Entries, baselines and shapes come from
:mod:`.selection`, the timing from :mod:`.timing`, the row type from :mod:`.results`.

**What is timed is the operator.** Our kernels are timed as a model calls them: the compiled
operator (``torch.ops.quantgemm.gemm``, after ``quantize`` for a kernel that reads quantized
activations), on inputs the public API has checked once before timing (:func:`operator_call`).
The checking ``gemm()`` would add per call what a model does not pay: Python checks, and for a
kernel whose Q8_1 activations ``quantize()`` makes, two more reductions over A and two host
synchronisations (its finite and fp16-range checks). The output is the tensor ``gemm()`` returns.

**Two timing methods.** By default our kernels are timed call by call, so every call pays the
Python and torch dispatch cost (tens of microseconds). llama.cpp's rows (``ggml=True``) run the
same ``mul_mat`` many times in one graph, as ``test-backend-ops perf`` does. With ``ggml`` (or
``batched``) our kernels are timed the same way: R back-to-back calls per sample, R being the
repeat count test-backend-ops would use for the shape, time / R; on a GPU the launches then
overlap their host-side cost with the previous kernel, as ggml's graph does. The ``batch`` column
of every row says which method produced it.

**Two cache regimes** (CUDA): warm, every call on the same weights, which stay in the L2 when they
fit; or cold, call i on weight copy i mod C, the C copies together at least 4x the L2, as a model's
layers are read. The ``cache`` and ``copies`` columns say which.
"""

from __future__ import annotations

import itertools
import time
import statistics

import torch

from .. import formats as F
from ..registry import KERNELS, Kernel
from .results import Row
from .selection import Entry, _baseline, baseline_name, entry, ggml_entries, parse_shapes, select_kernels
from .timing import Timing, time_callable


def bytes_moved(k: Kernel, M: int, N: int, K: int) -> int:
    """The fewest bytes a kernel must move: weights, activations (as the kernel reads them) and C."""
    wbytes = M * K * 4 if k.wfmt == "f32" else M * F.row_bytes(k.wfmt, K)
    abytes = N * K * 4 if k.afmt == "f32" or k.fused_quant else N * F.row_bytes(k.afmt, K)
    return wbytes + abytes + N * M * 4


def _make_weights(M: int, K: int, device: str, seed: int = 0) -> torch.Tensor:
    return torch.randn(M, K, generator=torch.Generator().manual_seed(seed)).to(device)


def _make_activations(N: int, K: int, device: str, seed: int = 0) -> torch.Tensor:
    # Its own generator: the weights of a shape do not depend on N, so a sweep over N reuses them.
    return torch.randn(N, K, generator=torch.Generator().manual_seed(seed + 1)).to(device)


def operator_call(k: Kernel, A: torch.Tensor, Wk: torch.Tensor, include_activation_quant: bool = True):
    """A no-argument callable that runs kernel ``k`` once through the compiled operator, as a model
    calls it, and returns what ``gemm(A, Wk, k)`` returns (``Wk`` is already in the weight format).

    The inputs are checked once, here, by the public API on their first rows: its checks (dtypes,
    layout, device, K, the kernel's device and compute capability) hold for the whole tensors when
    they hold for those rows, and the operators check shapes again. Kernels with 8-bit activations
    quantize A inside the call with the kernel's ``q8_1_sum`` mode, as ``gemm()`` does; with
    ``include_activation_quant=False`` A is quantized once, before, and the call is the GEMM alone.
    """
    from .. import api

    mode = api._SUM_MODE[k.q8_1_sum]
    if k.afmt != "f32" and not k.fused_quant and not include_activation_quant:
        Aq = api.quantize(A, k.afmt, q8_1_sum=k.q8_1_sum)  # once, outside the timed call
        api.gemm_quantized(Aq[:1], Wk[:1], k)
        gemm = torch.ops.quantgemm.gemm
        return lambda: gemm(Aq, Wk, k.name)
    api.gemm(A[:1], Wk[:1], k)
    gemm, quantize = torch.ops.quantgemm.gemm, torch.ops.quantgemm.quantize
    if k.afmt == "f32" or k.fused_quant:
        return lambda: gemm(A, Wk, k.name, mode)
    return lambda: gemm(quantize(A, k.afmt, mode), Wk, k.name)


def _result(k: Kernel, M: int, N: int, K: int, t: Timing) -> dict:
    flops = 2.0 * M * N * K
    nbytes = bytes_moved(k, M, N, K)
    return {
        "kernel": k.name,
        "device": k.device,
        "M": M,
        "N": N,
        "K": K,
        "median_ms": t.median_s * 1e3,
        "min_ms": t.min_s * 1e3,
        "reps": t.reps,
        "gflops": flops / t.median_s / 1e9,
        "tflops": flops / t.median_s / 1e12,
        "gbps": nbytes / t.median_s / 1e9,
        "bytes": nbytes,
    }


def bench_kernel(
    kernel,
    M: int,
    N: int,
    K: int,
    warmup: int = 3,
    reps: int = 10,
    seed: int = 0,
    include_activation_quant: bool = True,
) -> dict:
    """Time one kernel on one shape (the operator, see :func:`operator_call`). Returns a dict with
    the median time, GFLOP/s and GB/s."""
    from .. import api

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    A, W = _make_activations(N, K, k.device, seed), _make_weights(M, K, k.device, seed)
    Wk = W if k.wfmt == "f32" else api.quantize(W, k.wfmt)
    t = time_callable(operator_call(k, A, Wk, include_activation_quant), k.device, warmup, reps)
    return _result(k, M, N, K, t)


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
        fn = operator_call(k, A, Wk[:m], include_activation_quant)
        return time_callable(fn, k.device, warmup=0, reps=2).min_s

    t1 = probe(_PROBE_M)
    upper = t1 * M / _PROBE_M
    if upper <= max_seconds or t1 > max_seconds:
        return upper
    t2 = probe(2 * _PROBE_M)
    return t1 + max(t2 - t1, 0.0) * (M - _PROBE_M) / _PROBE_M


def _k_step(k: Entry) -> int:
    """Values per block of the kernel's largest block (32; 256 for the K-quants): K must be a multiple."""
    return max(F.SPECS[f].block_size if f in F.SPECS else F.QK for f in (k.wfmt, k.afmt))


#: Most weight copies a CPU row rotates over in the cold regime (see run_sweep).
MAX_CPU_COPIES = 512


def _row_base(k: Entry, M: int, N: int, K: int, include_activation_quant: bool) -> Row:
    ggml = k.side == "llama.cpp"
    return Row(
        kernel=k.name,
        source=k.side,
        device=k.device,
        wfmt=k.wfmt,
        afmt=k.afmt,
        chapter=k.chapter,
        M=M,
        N=N,
        K=K,
        bytes=bytes_moved(k, M, N, K) if K % _k_step(k) == 0 else None,
        act_quant_timed=k.afmt != "f32" and (include_activation_quant or ggml),
        batch=1,  # calls per timed sample (1: call by call; >1: test-backend-ops style)
        cache="warm",
        copies=1,
        timing="ggml" if ggml else "",
    )  # ours: events, cuda-graph or perf_counter, once timed


def _time_ggml(k: Kernel, A, W, M, N, K, warmup, reps, copies: int = 1):
    """ggml's mul_mat as test-backend-ops times it; with ``copies`` > 1 (the CPU's cold regime), one
    graph of ``copies`` mul_mats, each on its own copy of the weights, per compute."""
    from .. import llamacpp

    backend = "cuda" if k.device == "cuda" else "cpu"
    repack = k.name.endswith("_repack")
    if copies <= 1:
        s = llamacpp.time_ggml_mul_mat(
            W, A, k.wfmt, backend=backend, warmup=max(1, warmup), computes=max(1, reps), repack=repack
        )
        return Timing(s, s, max(1, reps))
    times = []
    with llamacpp.MulMatRunner([W.copy() for _ in range(copies)], A, k.wfmt, backend, repack=repack) as run:
        for _ in range(max(1, warmup)):
            run.compute()
        for _ in range(max(1, reps)):
            t0 = time.perf_counter()
            run.compute()
            times.append((time.perf_counter() - t0) / run.n_mul_mats)
    return Timing(statistics.median(times), min(times), len(times))


def _entries(kernels, ggml: bool, baseline: bool) -> list[Entry]:
    """The entries ``run_sweep`` times, from its ``kernels`` argument (see there)."""
    if kernels is None or isinstance(kernels, str):
        return select_kernels(None, kernels, ggml=ggml, baseline=baseline)
    ks: list[Entry] = []
    for item in kernels:  # Kernel objects, registry names, ggml_* names or glob patterns
        if isinstance(item, Kernel) or item in KERNELS:
            ks.append(entry(item))
        else:
            ks += select_kernels(None, [item], ggml=True, baseline=False)
    ks = list({k.name: k for k in ks}.values())
    if baseline:
        names = {k.name for k in ks}
        ks = [entry(b) for b in dict.fromkeys(baseline_name(k) for k in ks) if b in KERNELS and b not in names] + ks
    if ggml:
        ks += [e for dev in ("cpu", "cuda") for e in ggml_entries(dev) if e.name not in {k.name for k in ks}]
    return ks


def run_sweep(
    kernels=None,
    shapes="small",
    *,
    warmup: int = 2,
    reps: int = 10,
    max_seconds: float = 1.0,
    include_activation_quant: bool = True,
    seed: int = 0,
    progress: bool = True,
    baseline: bool = True,
    ggml: bool = False,
    batched: bool | None = None,
    graph: bool = False,
    cache: str = "warm",
) -> list[dict]:
    """Time kernels over shapes; one row (a dict, :class:`~.results.Row`'s fields) per (kernel,
    shape), skipped ones included.

    ``kernels``: names, :class:`Kernel` or :class:`~.selection.Entry` objects, glob patterns, or
    None for all registered ones (see :func:`~.selection.select_kernels`; ``ggml=True`` adds
    llama.cpp's mul_mat). ``shapes``: see :func:`~.selection.parse_shapes`. A combination is
    skipped, with the reason in the row, when its device is missing or one call is estimated to
    take longer than ``max_seconds``. Kernels with 8-bit activations are timed with the activation
    quantization included unless ``include_activation_quant=False`` (llama.cpp's mul_mat always
    includes it). ``batched`` (default: on with ``ggml``, ``graph`` or a llama.cpp entry) times our
    kernels as test-backend-ops times ggml: R calls back to back per sample (see the module
    docstring). ``graph``: CUDA kernels that take float32 activations are timed as CUDA-graph
    replays of those calls (:func:`~.timing.time_samples`); the row's ``timing`` says how each row
    was timed.

    ``cache`` (CUDA kernels): ``"warm"``, every call on the same weights (they stay in the L2 when
    they fit), or ``"cold"``, call i on weight copy i mod C, the C copies together at least 4x the
    L2 (``measure.copies_for``), as a model's layers are read; a CUDA graph then captures whole
    rotations. The ``cache`` and ``copies`` columns say which; on a CPU ``cache`` is ``"n/a"``.
    """
    if cache not in ("warm", "cold"):
        raise ValueError(f"cache must be 'warm' or 'cold', got {cache!r}")
    from .. import api

    ks = _entries(kernels, ggml, baseline)
    if batched is None:
        batched = ggml or graph or any(k.side == "llama.cpp" for k in ks)
    shape_list = parse_shapes(shapes)
    device_ok = {"cpu": (True, "")}
    if any(k.device == "cuda" for k in ks):
        device_ok["cuda"] = _cuda_ready()
    if any(k.side == "llama.cpp" for k in ks):
        from .. import llamacpp

        info = llamacpp.available()
        ggml_ok = {
            "cpu": (info["cpu_backend"], f"ggml CPU backend unavailable: {info['error']}"),
            "cuda": (info["cuda_backend"], "this ggml has no CUDA backend (ggml-py built with -DGGML_CUDA=on has)"),
        }
    if any(ok for ok, _ in device_ok.values()):
        from .._build import load_extension

        load_extension()  # compile now, not inside the first timed call

    rows: list[Row] = []
    total, done = len(ks) * len(shape_list), 0
    inputs: dict = {}  # tensors shared by the kernels of a shape
    for M, N, K in shape_list:
        for k in ks:
            done += 1
            row = _row_base(k, M, N, K, include_activation_quant)
            rows.append(row)
            label = f"[{done}/{total}] {k.name:<26} M={M} N={N} K={K}"
            # the shape first (whatever the machine, the kernel cannot take it), then the machine
            step = _k_step(k)
            ok, why = device_ok.get(k.device, (False, f"unknown device {k.device}"))
            if K % step:
                ok, why = False, f"K={K} is not a whole number of the kernel's {step}-value blocks"
            if ok and k.side == "llama.cpp":
                ok, why = ggml_ok[k.device]
            if ok and k.device == "cuda" and not k.runs_on(torch.cuda.get_device_capability()):
                ok, why = False, f"needs compute capability {k.min_sm} to {k.max_sm}"
            if not ok:
                row.status, row.reason = "skipped", why
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
                cpu_copies, cpu_cold = 1, False
                if cache == "cold" and k.device == "cpu":
                    # the CPU's cold regime: copies past the last-level cache, as a model's layers are
                    # read once per token (a CUDA row's copies fill 4x the L2, below). At most
                    # MAX_CPU_COPIES: weights too small to fill the cache that way are timed over
                    # those copies and the row says warm, with the reason.
                    from ..measure import copies_for
                    from .machine import cpu_last_level_cache_bytes

                    llc, wbytes = cpu_last_level_cache_bytes(), Wk.numel() * Wk.element_size()
                    cpu_copies = min(copies_for(wbytes, llc), MAX_CPU_COPIES)
                    cpu_cold = cpu_copies * wbytes >= llc
                    if not cpu_cold:
                        row.reason = (
                            f"{cpu_copies} copies of {wbytes} B stay inside the {llc >> 20} MiB last-level cache: warm"
                        )
                if k.side == "llama.cpp":
                    from ..llamacpp import perf_repeats

                    row.batch = perf_repeats(M, N, K, "cuda" if k.device == "cuda" else "cpu")
                    if cpu_copies > 1:
                        row.batch, row.copies, row.cache = cpu_copies, cpu_copies, "cold" if cpu_cold else "warm"
                    t = _time_ggml(k, A.cpu().numpy(), Wk.cpu().numpy(), M, N, K, warmup, reps, cpu_copies)
                else:
                    est = _estimate_s(k, A, Wk, M, N, K, include_activation_quant, max_seconds)
                    row.est_ms = None if est is None else est * 1e3
                    if est is not None and est > max_seconds:
                        row.status = "skipped"
                        row.reason = f"estimated {est:.3g} s per call > --max-seconds {max_seconds:g}"
                        if progress:
                            print(f"{label}: skipped ({row.reason})", flush=True)
                        continue
                    if batched:
                        from ..llamacpp import perf_repeats

                        row.batch = perf_repeats(M, N, K, "cuda" if k.device == "cuda" else "cpu")
                    fn = operator_call(k, A, Wk, include_activation_quant)
                    use_graph = graph and k.device == "cuda" and (k.afmt == "f32" or k.fused_quant)
                    if cache == "cold":
                        # every call reads the next copy: a copy comes back only after the others
                        # have passed through the L2 (GPU) or the last-level cache (CPU)
                        from ..measure import copies_for

                        if k.device == "cuda":
                            l2 = torch.cuda.get_device_properties(A.device).L2_cache_size
                            n_copies = copies_for(Wk.numel() * Wk.element_size(), l2)
                        else:
                            n_copies = cpu_copies
                        ws = [Wk] + [Wk.clone() for _ in range(n_copies - 1)]
                        calls = [operator_call(k, A, w, include_activation_quant) for w in ws]
                        turn = itertools.cycle(calls)
                        fn = lambda: next(turn)()  # noqa: E731 - the next copy on every call
                        row.copies = len(ws)
                        if use_graph:  # a replayed graph repeats its captured calls: capture whole rotations
                            row.batch = len(ws) * -(-row.batch // len(ws))
                    row.cache = cache if k.device == "cuda" or cpu_cold or cache == "warm" else "warm"
                    per_sample = (est or 0.0) * row.batch
                    n = reps if est is None else min(reps, max(3, int(_REP_BUDGET_S / max(per_sample, 1e-9))))
                    row.timing = "cuda-graph" if use_graph else "events" if k.device == "cuda" else "perf_counter"
                    t = time_callable(
                        fn,
                        k.device,
                        warmup=warmup if est is None or est < 0.5 else 1,
                        reps=n,
                        batch=row.batch,
                        graph=use_graph,
                    )
            except Exception as e:  # noqa: BLE001 - one broken kernel must not end a long sweep
                row.status, row.reason = "error", f"{type(e).__name__}: {e}".splitlines()[0][:200]
                if progress:
                    print(f"{label}: ERROR {row.reason}", flush=True)
                continue
            res = _result(k, M, N, K, t)
            for f in ("median_ms", "min_ms", "reps", "gflops", "tflops", "gbps"):
                setattr(row, f, res[f])
            if progress:
                print(f"{label}: {row.median_ms:.4g} ms, {row.tflops:.3g} TFLOPS, {row.gbps:.3g} GB/s", flush=True)
    _add_speedups(rows)
    return [r.to_dict() for r in rows]


def _add_speedups(rows: list[Row]) -> None:
    """speedup_vs_naive = naive time / this time, the naive time measured or, where the naive
    kernel was skipped as too slow, its estimate (``speedup_basis`` says which)."""
    by_key = {(r.kernel, r.M, r.N, r.K): r for r in rows}
    for r in rows:
        if r.status != "ok":
            continue
        b = by_key.get((_baseline(r.device, r.wfmt, r.afmt, r.source), r.M, r.N, r.K))
        if b is None:
            continue
        r.baseline = b.kernel
        if b.status == "ok":
            r.speedup_vs_naive, r.speedup_basis = b.median_ms / r.median_ms, "measured"
        elif b.est_ms:
            r.speedup_vs_naive, r.speedup_basis = b.est_ms / r.median_ms, "estimated"
