"""The Python side of tools/sanitize.sh: calls the CUDA kernels so that compute-sanitizer can watch.

    python tools/sanitize_driver.py build              build the extension (outside the sanitizer)
    python tools/sanitize_driver.py list               what `kernels` will call
    python tools/sanitize_driver.py kernels            every CUDA kernel of KERNELS on SANITIZE_SHAPES,
                                                       the CUDA quantizers, the appendix B loads,
                                                       appendix C's conv1d + SiLU kernel
    python tools/sanitize_driver.py kernels --only q4_k,q6_k
                                                       only the CUDA kernels whose name contains one
                                                       of the comma-separated strings (nothing else)
    python tools/sanitize_driver.py planted-misaligned a 32-bit load at a 2-byte-aligned address
    python tools/sanitize_driver.py planted-uninit     a kernel reading memory nobody wrote

`kernels` also checks every result against the reference (testing.KERNEL_NMSE) and exits 1 on a
mismatch, so a kernel that the sanitizer slows into a different code path still has to be right.
The two planted bugs are the self-test: a sanitizer run that reports nothing on them is broken.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import quantgemm_kernels as qk  # noqa: E402
from quantgemm_kernels import formats as F  # noqa: E402
from quantgemm_kernels.appendices import misaligned as mis  # noqa: E402
from quantgemm_kernels.appendices import simulation as sim  # noqa: E402
from quantgemm_kernels.testing import KERNEL_NMSE, SANITIZE_SHAPES, check_kernel, shape_for  # noqa: E402


def _need_cuda() -> None:
    if not torch.cuda.is_available() or not qk.cuda_kernels_built():
        print("sanitize_driver: needs a CUDA GPU and the CUDA build of the kernels", file=sys.stderr)
        sys.exit(2)


def _selected(only: list[str] | None) -> list:
    """The CUDA kernels to call: all, or those whose name contains one of ``only``."""
    return [k for k in qk.kernels(device="cuda") if not only or any(s in k.name for s in only)]


def calls(only: list[str] | None = None) -> list[str]:
    names = [
        f"{k.name} M={m} N={n} K={kk}"
        for k in _selected(only)
        if not torch.cuda.is_available() or k.runs_on(torch.cuda.get_device_capability())
        for (m, n, kk) in (shape_for(k, *s) for s in SANITIZE_SHAPES)
    ]
    if only:
        return names
    names += [f"quantize/dequantize {fmt} on cuda" for fmt in F.FORMATS]
    names += [f"misaligned_demo {mode}" for mode in mis.LEGAL_MODES]
    names += [f"conv1d_silu_int8 {c}" for c in CONV1D_CASES]
    return names


#: appendix C's kernel: ragged (batch, channels, time, width), per-tensor and per-channel x scales,
#: with and without bias, a sequence shorter than the filter, float output on and off.
CONV1D_CASES = [
    dict(batch=1, channels=1, time=1, width=4),
    dict(batch=2, channels=3, time=2, width=4, with_bias=False),
    dict(batch=1, channels=37, time=129, width=3, x_scale_per_channel=True),
    dict(batch=3, channels=64, time=257, width=4),
]


def run_kernels(only: list[str] | None = None) -> int:
    _need_cuda()
    bad, n_calls, t0 = [], 0, time.perf_counter()
    for k in _selected(only):
        if not k.runs_on(torch.cuda.get_device_capability()):
            print(f"skip {k.name}: runs on compute capability {k.min_sm} to {k.max_sm}", flush=True)
            continue
        for M, N, K in (shape_for(k, *s) for s in SANITIZE_SHAPES):  # K x 8 for the K-quants
            err, C, _ = check_kernel(k, M, N, K, "normal", seed=M + N + K)
            n_calls += 1
            if not err <= KERNEL_NMSE:
                bad.append(f"{k.name} M={M} N={N} K={K}: NMSE {err:.3g}")
        print(f"ok  {k.name}", flush=True)
    if only:
        return _report(bad, n_calls, t0)
    for fmt in (f for f, spec in F.SPECS.items() if spec.cuda):  # formats with CUDA quantizers
        x = torch.randn(5, 3 * F.SPECS[fmt].block_size, generator=torch.Generator().manual_seed(0))
        q = qk.quantize(x.cuda(), fmt)
        n_calls += 2
        if not np.array_equal(q.cpu().numpy(), qk.quantize(x, fmt).numpy()):
            bad.append(f"quantize {fmt}: CUDA bytes differ from the CPU quantizer's")
        if not torch.equal(qk.dequantize(q, fmt).cpu(), qk.dequantize(q.cpu(), fmt)):
            bad.append(f"dequantize {fmt}: CUDA differs from CPU")
    print("ok  quantize/dequantize", flush=True)
    q = mis.make_blocks(37, seed=1)  # 37 blocks: a partly empty thread block
    ref = mis.reference_block_sums(q.cpu().numpy())
    for mode in mis.LEGAL_MODES:
        n_calls += 1
        if not np.array_equal(mis.block_sums(q, mode).cpu().numpy(), ref):
            bad.append(f"misaligned_demo {mode}: differs from the reference")
    print("ok  misaligned_demo", flush=True)
    for case in CONV1D_CASES:
        inp = sim.make_inputs(seed=7, **case)
        args = (inp.x, inp.w, inp.x_scale, inp.w_scale, inp.bias, inp.out_scale)
        want_q, want_z = sim.simulate_faithful(*args, return_float=True)
        for return_float in (False, True):
            out = sim.conv1d_silu_int8(
                *(a.cuda() if isinstance(a, torch.Tensor) else a for a in args), return_float=return_float
            )
            q = out[0] if return_float else out
            n_calls += 1
            if not np.array_equal(q.cpu().numpy(), sim._np(want_q)):
                bad.append(f"conv1d_silu_int8 {case} return_float={return_float}: q differs from the simulation")
            if return_float and not sim.same_bits(out[1].cpu(), want_z):
                bad.append(f"conv1d_silu_int8 {case}: z differs from the simulation")
    print("ok  conv1d_silu_int8", flush=True)
    return _report(bad, n_calls, t0)


def _report(bad: list[str], n_calls: int, t0: float) -> int:
    torch.cuda.synchronize()
    for b in bad:
        print("MISMATCH", b, flush=True)
    print(f"driver: {n_calls} kernel calls, {len(bad)} wrong results, {time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if bad else 0


def planted_misaligned() -> int:
    _need_cuda()
    q = mis.make_blocks(64)
    y = mis.block_sums(q, "naive", allow_fault=True)
    torch.cuda.synchronize()  # raises here (outside the sanitizer) or the sanitizer reports first
    print("planted-misaligned: the kernel ran without an error: nothing caught it", y.sum().item())
    return 0


def planted_uninit() -> int:
    _need_cuda()
    q = torch.empty(64 * 18, dtype=torch.uint8, device="cuda")  # never written: initcheck must object
    y = mis.block_sums(q, "two_halves")
    torch.cuda.synchronize()
    print("planted-uninit: ran", y.numel(), "blocks of uninitialised bytes")
    return 0


def main(argv) -> int:
    cmd = argv[1] if len(argv) > 1 else "kernels"
    only = argv[3].split(",") if len(argv) > 3 and argv[2] == "--only" else None
    if cmd == "build":
        _need_cuda()
        print("sanitize_driver: CUDA kernels built")
        return 0
    if cmd == "list":
        print("\n".join(calls(only)))
        return 0
    if cmd == "kernels":
        return run_kernels(only)
    if cmd == "planted-misaligned":
        return planted_misaligned()
    if cmd == "planted-uninit":
        return planted_uninit()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
