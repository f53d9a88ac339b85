"""Time torch's own matmuls on the shapes of a bench sweep, as references for chapter 6:
cuBLAS fp16 (A fp16 [N, K] @ W^T, fp32 accumulation) and cuBLASLt int8 (torch._int_mm, int32 out).
Same timing as the bench CLI's --graph rows (CUDA-graph replays of R back-to-back calls).

    python tools/torch_refs.py --shapes llama,tutorial --out bench_results/<machine>/<date>
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from quantgemm_kernels import bench  # noqa: E402
from quantgemm_kernels.llamacpp import perf_repeats  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="llama,tutorial")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for M, N, K in bench.parse_shapes(args.shapes):
        g = torch.Generator(device="cuda").manual_seed(0)
        a16 = torch.randn(N, K, device="cuda", generator=g).half()
        w16 = torch.randn(M, K, device="cuda", generator=g).half()
        a8 = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8, generator=g)
        w8 = torch.randint(-127, 128, (K, M), device="cuda", dtype=torch.int8, generator=g).t().contiguous().t()
        cases = {"torch_fp16_cublas": lambda: a16 @ w16.t()}
        if N > 16 and N % 8 == 0 and K % 8 == 0 and M % 8 == 0:  # torch._int_mm's constraints
            cases["torch_int8_cublaslt"] = lambda: torch._int_mm(a8, w8)
        for name, fn in cases.items():
            R = perf_repeats(M, N, K, "cuda")
            t = bench.time_callable(fn, "cuda", warmup=2, reps=args.reps, batch=R, graph=True)
            flops = 2.0 * M * N * K
            rows.append(
                {
                    "kernel": name,
                    "source": "torch",
                    "device": "cuda",
                    "M": M,
                    "N": N,
                    "K": K,
                    "status": "ok",
                    "median_ms": t.median_s * 1e3,
                    "min_ms": t.min_s * 1e3,
                    "reps": t.reps,
                    "batch": R,
                    "timing": "cuda-graph",
                    "tflops": flops / t.median_s / 1e12,
                    "gflops": flops / t.median_s / 1e9,
                }
            )
            print(
                f"{name:22s} {M}x{N}x{K}: {t.median_s * 1e3:.4f} ms  {flops / t.median_s / 1e12:.1f} TFLOPS", flush=True
            )
    header = bench.make_header("cuda", what="torch matmul references for chapter 6 (tools/torch_refs.py)")
    csv_path, json_path = bench.write_results(rows, header, Path(args.out))
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
