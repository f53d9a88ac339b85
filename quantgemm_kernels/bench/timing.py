"""The one timing mechanism for CPU and CUDA: warm-up calls, then repeated samples, their median.

A sample is timed with CUDA events on a GPU and ``time.perf_counter`` on a CPU. It is one call, or
``batch`` back-to-back calls divided by ``batch`` (throughput, as llama.cpp's test-backend-ops
measures), or on a GPU one replay of those calls captured in a CUDA graph (the GPU's time alone,
without Python's cost per call). :func:`time_samples` returns every sample, for plots of the
spread; :func:`time_callable` their median. The sweep, the roofline's ceilings, the notebooks and
the appendices all time through these two functions.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch


@dataclass
class Timing:
    median_s: float
    min_s: float
    reps: int


def capture_graph(fn, calls: int = 1) -> torch.cuda.CUDAGraph:
    """``calls`` back-to-back calls of ``fn`` captured once into a CUDA graph, not yet replayed:
    ``.replay()`` reruns their GPU work. The capture's one implementation, for :func:`time_samples`
    and ``measure.graphed``; the caller synchronizes first and handles a failed capture."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def time_samples(
    fn,
    device: str = "cpu",
    warmup: int = 3,
    reps: int = 10,
    min_time_s: float = 0.0,
    batch: int = 1,
    graph: bool = False,
) -> list[float]:
    """Every individual time (seconds) of ``fn()``: warm-up calls first, then at least ``reps``
    samples and at least ``min_time_s`` seconds (at most 10,000); CUDA events on a GPU,
    perf_counter on a CPU. With ``batch`` > 1 a sample is ``batch`` back-to-back calls, and its
    time is divided by ``batch`` (throughput, as test-backend-ops measures).

    ``graph`` (CUDA): the ``batch`` calls are captured once into a CUDA graph and a sample is one
    replay, so the time is the GPU's alone, without Python's and the dispatcher's cost per call
    (llama.cpp's CUDA backend replays graphs too). ``fn`` must not synchronize: the compiled
    operators qualify, the validating ``gemm()`` on a Q8_1 kernel (it checks A on the host) does not.
    """
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    if device == "cuda" and graph:
        g = capture_graph(fn, batch)
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


def time_callable(
    fn,
    device: str = "cpu",
    warmup: int = 3,
    reps: int = 10,
    min_time_s: float = 0.0,
    batch: int = 1,
    graph: bool = False,
) -> Timing:
    """Median time of ``fn()``. Repeats at least ``reps`` times and until ``min_time_s`` has passed
    (``batch``, ``graph``: see :func:`time_samples`)."""
    times = time_samples(fn, device, warmup, reps, min_time_s, batch, graph)
    return Timing(statistics.median(times), min(times), len(times))
