"""The command line: ``python -m quantgemm_kernels.bench`` times every registered kernel on
llama.cpp's test-backend-ops shapes, prints a table and writes a CSV and a JSON file under
``bench_results/<machine>/<date>/``; ``--help`` lists the options.

The header printed and recorded first says what produces the numbers (machine, commit, torch,
threads, ggml) and, unless ``--no-ceilings``, the roofline's two ceilings per device.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
from pathlib import Path

import torch

from .ceilings import measure_ceilings
from .machine import ROOT
from .results import format_table, make_header, write_results
from .selection import SHAPE_SETS, parse_shapes, select_kernels
from .sweep import run_sweep


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m quantgemm_kernels.bench",
        description="Time the registered GEMM kernels on llama.cpp's test-backend-ops shapes "
        "(C [N, M] = A [N, K] @ W [M, K]^T; M, N, K = llama.cpp's m, n, k).",
    )
    p.add_argument(
        "--device",
        choices=("all", "cpu", "cuda"),
        default="all",
        help="kernels of this device (default: all; CUDA ones skip without a GPU)",
    )
    p.add_argument("--kernels", default="", help="comma-separated globs on kernel names, e.g. 'cpu_q4_0_*,*_simd'")
    p.add_argument(
        "--shapes",
        default="llama,tutorial",
        help=f"comma-separated set names {tuple(SHAPE_SETS)} and MxNxK items (default: llama,tutorial)",
    )
    p.add_argument("--ggml", action="store_true", help="also time llama.cpp's own mul_mat (ggml_<device>_<wfmt>)")
    p.add_argument("--no-baseline", action="store_true", help="do not add the naive kernels speedups need")
    p.add_argument(
        "--exclude-act-quant",
        action="store_true",
        help="time 8-bit-activation kernels on pre-quantized activations (default: quantization included)",
    )
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=10, help="timed calls per combination (fewer for slow ones, at least 3)")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=1.0,
        help="skip a combination whose single call is estimated to take longer (default 1.0)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads; ggml uses the same)")
    p.add_argument(
        "--batched",
        action="store_true",
        help="time our kernels as R back-to-back calls per sample, as test-backend-ops times ggml "
        "(on by default with --ggml and --graph)",
    )
    p.add_argument(
        "--graph",
        action="store_true",
        help="CUDA kernels taking float32 activations: time CUDA-graph replays of the batched calls "
        "(GPU time without Python's per-call cost; implies --batched: a graph of one call "
        "would time the graph launch)",
    )
    p.add_argument(
        "--cache",
        choices=("warm", "cold"),
        default="warm",
        help="warm (same weights every call) or cold (rotate over copies >= 4x the L2 on a GPU, the last-level cache on a CPU)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="results folder (default bench_results/<machine-slug>/<date>)")
    p.add_argument("--no-ceilings", action="store_true", help="skip measuring copy bandwidth and peak matmul rate")
    p.add_argument("--list", action="store_true", help="list the kernels and shapes that would run, then stop")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def cpu_build() -> dict:
    """How the CPU kernels were compiled: the flags (the instruction set: ``-march=native`` or
    ``QUANTGEMM_CPU_ARCH``'s), the SIMD path chapter 4's kernels took, and how their threads run."""
    from .._build import build_config, load_extension

    load_extension()
    ops = torch.ops.quantgemm
    return {
        "cflags": build_config(False)["cflags"],
        "cpu_arch": os.environ.get("QUANTGEMM_CPU_ARCH", "native"),
        "simd": ops.cpu_simd_path(),
        "parallel": ops.parallel_mode(),
    }


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
    extra = {
        "activation_quant_timed": include_aq,
        "args": vars(args),
        "shapes": [list(s) for s in shapes],
        "kernels": [k.name for k in kernels],
    }
    if any(k.device == "cpu" and k.side == "ours" for k in kernels):
        extra["cpu_build"] = cpu_build()
    if args.ggml:
        from .. import llamacpp

        extra["ggml"] = llamacpp.available()
    header = make_header(main_device, **extra)
    print(
        f"# machine: {header['machine']}\n# date: {header['date']}   commit: {header['git_commit']}"
        f"{' (uncommitted changes)' if header['git_dirty'] else ''}\n# torch {header['torch']}, "
        f"{header['threads']} CPU threads" + (f"\n# {llamacpp.info_line()}" if args.ggml else "")
    )
    print(
        "# 8-bit-activation kernels: quantizing the activations is "
        + (
            "INSIDE the timed region (--exclude-act-quant to leave it out)"
            if include_aq
            else "OUTSIDE the timed region (llama.cpp's rows always include it)"
        ),
        flush=True,
    )
    if not args.no_ceilings:
        header["ceilings"] = {}
        for dev in sorted({k.device for k in kernels}):
            if dev == "cuda" and not torch.cuda.is_available():
                continue
            c = measure_ceilings(dev)
            header["ceilings"][dev] = c
            rates = ", ".join(f"{name} {v:.3g}" for name, v in c["matmul_tflops"].items())
            print(
                f"# {dev} ceilings: copy {c['copy_gbps']:.3g} GB/s ({c['copy_mb']:g} MB), "
                f"{c.get('copy_gbps_cache', float('nan')):.3g} GB/s ({c['cache_copy_mb']:g} MB, in cache); "
                f"matmul TFLOPS: {rates}",
                flush=True,
            )
    rows = run_sweep(
        kernels,
        shapes,
        warmup=args.warmup,
        reps=args.reps,
        max_seconds=args.max_seconds,
        include_activation_quant=include_aq,
        seed=args.seed,
        progress=not args.quiet,
        baseline=False,
        batched=args.batched or args.ggml or args.graph,
        graph=args.graph,
        cache=args.cache,
    )
    print()
    print(format_table(rows))
    out = Path(args.out) if args.out else ROOT / "bench_results" / header["machine_slug"] / _dt.date.today().isoformat()
    csv_path, json_path = write_results(rows, header, out)
    print(f"\nwrote {csv_path}\n      {json_path}")
    print("(~ marks a speedup over an estimated naive time; the naive kernel was too slow to run)")
    return 0
