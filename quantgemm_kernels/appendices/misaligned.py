"""Appendix B: misaligned loads of Q4_0 quants, shown safely and measured.

A Q4_0 block is 18 bytes, ``d`` (fp16) then 16 bytes of quants at offset 2, so in an array of
blocks the quants are only 2-byte aligned. A kernel that reads them as ``*(const int*)`` breaks
the natural-alignment rule of GPU loads and dies with ``cudaErrorMisalignedAddress``
("misaligned address"). That error is sticky: every later CUDA call of the process fails too.
So the faulting kernel runs only in a child process (:func:`run_in_child`), whose stderr and
exit status come back as data.

The kernels (``csrc/appendix_b/misaligned_demo.cu``) all compute, one thread per block, the sum
of the block's 32 dequantized values; they differ only in how the quant bytes are loaded
(:data:`MODES`). They build on first use into their own small extension, CUDA only, with its
operators under ``torch.ops.quantgemm_appendix_b`` (``_build.load_appendix_b``); where CUDA cannot
be built, a call raises RuntimeError. The layout functions are numpy and run everywhere.
:func:`measure_bandwidth` times the legal ones against each other, :func:`record` writes both
results to ``bench_results/appendix_b/<gpu>.json`` for the CPU build of the book to show.

Command line (GPU machine): ``python -m quantgemm_kernels.appendices.misaligned --record``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import formats as F

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "bench_results" / "appendix_b"

#: mode name -> the integer the CUDA launcher takes (csrc/appendix_b/misaligned_demo.h)
MODES = {"naive": 0, "two_halves": 1, "bytes": 2, "repacked_b4": 3, "repacked_b16": 4}

#: what each mode does to get one block's 16 quant bytes into registers
MODE_LOADS = {
    "naive": "4 x 32-bit loads at byte 2 of an 18-byte block (illegal: faults)",
    "two_halves": "8 x 16-bit loads, combined in pairs (load_int_b2, llama.cpp's get_int_b2)",
    "bytes": "16 x 8-bit loads, combined in fours (llama.cpp's get_int_b1)",
    "repacked_b4": "4 x 32-bit loads from a repacked 16-byte-per-block array",
    "repacked_b16": "1 x 128-bit load from a repacked 16-byte-per-block array",
}
LEGAL_MODES = ("two_halves", "bytes", "repacked_b4", "repacked_b16")


# ---------------------------------------------------------------------------------------------
# Layouts (pure numpy: runs everywhere)
# ---------------------------------------------------------------------------------------------


def lowest_alignment(addresses) -> int:
    """The largest power of two (up to 256) dividing every address: what a load may assume."""
    a = 256
    for addr in addresses:
        while addr % a:
            a //= 2
    return a


def layout_table(n_blocks: int = 64, base: int = 256, fmts=F.BASIC_FORMATS) -> list[dict]:
    """Per format (by default those of chapters 2-6): block size, byte offset of the quants, and the alignment of the quants over an
    array of ``n_blocks`` blocks starting at a ``base``-aligned address (torch and cudaMalloc give
    at least 256). Offsets come from the numpy dtypes that mirror ``csrc/formats.h``."""
    rows = []
    for fmt in fmts:
        dt = F.BLOCK_DTYPES[fmt]
        off = dt.fields["qs"][1]
        addrs = [base + b * dt.itemsize + off for b in range(n_blocks)]
        rows.append(
            {
                "format": fmt,
                "block_bytes": dt.itemsize,
                "qs_offset": off,
                "qs_alignment": lowest_alignment(addrs),
                "first_qs_addresses_mod_4": [(a - base) % 4 for a in addrs[:4]],
            }
        )
    return rows


def reference_block_sums(q: np.ndarray) -> np.ndarray:
    """float32 per Q4_0 block: d * (sum of the 32 nibbles - 8 * 32), the sum of its dequantized values.

    Exact in float32: d has 11 significant bits and the integer at most 9, so the product rounds
    nowhere and every kernel mode must match it bit for bit."""
    blocks = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1, F.BLOCK_BYTES["q4_0"])
    d = blocks[:, :2].copy().view("<f2").reshape(-1).astype(np.float32)
    qs = blocks[:, 2:].astype(np.int32)
    nibble_sum = (qs & 0x0F).sum(axis=1) + (qs >> 4).sum(axis=1)
    return d * (nibble_sum - 8 * F.QK).astype(np.float32)


def words_from_halves(qs_bytes: np.ndarray) -> np.ndarray:
    """The 32-bit words of quant bytes built as load_int_b2 builds them: two little-endian 16-bit
    halves, ``lo | hi << 16``. ``qs_bytes`` is uint8 [..., 16]; returns uint32 [..., 4]."""
    h = np.ascontiguousarray(qs_bytes, dtype=np.uint8).view("<u2").astype(np.uint32)
    return h[..., 0::2] | (h[..., 1::2] << 16)


# ---------------------------------------------------------------------------------------------
# The kernels (CUDA only)
# ---------------------------------------------------------------------------------------------


def _ops():
    from .._build import load_appendix_b

    return load_appendix_b()["ops"]


def load_kernels() -> None:
    """Build this appendix's extension (first use after a source change) and load it. CUDA only:
    where no CUDA build is possible it raises RuntimeError; :func:`block_sums` calls it as well."""
    _ops()


def repack(q):
    """Q4_0 bytes (uint8 tensor) -> (scales int16 [nb], quants uint8 [nb*16]): the same bytes in
    two arrays, so every block's quants start at a multiple of 16."""
    import torch

    blocks = q.reshape(-1, F.BLOCK_BYTES["q4_0"])
    scales = blocks[:, :2].contiguous().view(torch.int16).reshape(-1)
    quants = blocks[:, 2:].contiguous().reshape(-1)
    return scales, quants


def block_sums(q, mode: str, *, repacked=None, allow_fault: bool = False):
    """Run one mode on Q4_0 bytes ``q`` (a CUDA uint8 tensor); float32 [nb] per block.

    ``mode="naive"`` faults and poisons this process's CUDA context, so it is refused unless
    ``allow_fault=True`` (only the child process of :func:`run_in_child` passes that).
    ``repacked``: the output of :func:`repack` for the repacked modes (made here if not given).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {tuple(MODES)}, got {mode!r}")
    if mode == "naive" and not allow_fault:
        raise ValueError(
            "mode 'naive' ends this process's use of the GPU (a sticky CUDA error): "
            "run it with run_in_child(fixed=False)"
        )
    if q.device.type != "cuda":
        raise ValueError(f"the demonstration kernels run on a CUDA GPU, got a tensor on {q.device}")
    if q.data_ptr() % 16:  # checked here too: the operator's own check raises RuntimeError
        raise ValueError("q's data must start on a 16-byte boundary (a view at an offset?): pass q.clone()")
    if mode.startswith("repacked"):
        scales, quants = repacked if repacked is not None else repack(q)
        return _ops().misaligned_block_sums_repacked(scales, quants, MODES[mode])
    return _ops().misaligned_block_sums(q.contiguous(), MODES[mode])


def make_blocks(n_blocks: int, seed: int = 0, device: str = "cuda"):
    """``n_blocks`` Q4_0 blocks of seeded normal values, as uint8 bytes [n_blocks * 18] on ``device``."""
    import torch

    from ..api import quantize

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n_blocks, F.QK, generator=g, device=device)  # one block per row
    return quantize(x, "q4_0").reshape(-1)


# ---------------------------------------------------------------------------------------------
# The faulting kernel, in a child process
# ---------------------------------------------------------------------------------------------


def error_line(stderr: str) -> str:
    """The exception line of a Python traceback in ``stderr`` (``SomeError: message``), else its last line."""
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if not ln.startswith(" ") and ("Error:" in ln or "Exception:" in ln):
            return ln
    return lines[-1].strip() if lines else ""


def scrub_paths(text: str) -> str:
    """Replace this machine's folders in a traceback with placeholders before it is saved."""
    text = text.replace(str(ROOT), "<repo>")
    return re.sub(r'"/[^"]*?/(site-packages|dist-packages)/', r'"<\1>/', text)


@dataclass
class ChildResult:
    fixed: bool
    returncode: int | None  #: None when the child was killed at the timeout
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    @property
    def error_line(self) -> str:
        """The line of stderr that names the error: the exception line of the traceback (or the last line)."""
        return error_line(self.stderr)

    @property
    def report(self) -> dict | None:
        """The JSON line the child printed after a completed run, if any."""
        for ln in self.stdout.splitlines():
            if ln.startswith("{"):
                return json.loads(ln)
        return None


def run_in_child(fixed: bool, n_blocks: int = 4096, seed: int = 0, timeout: float = 300.0) -> ChildResult:
    """Run the naive (``fixed=False``) or the two-halves kernel (``fixed=True``) in a fresh Python
    process and return what it printed and its exit status. The child compares the kernel's
    output with :func:`reference_block_sums`; a fault ends the child, never this process."""
    from .._build import load_appendix_b, load_extension

    load_extension()  # build both here first (make_blocks quantizes with the core),
    load_appendix_b()  # so that the child only loads the cached libraries
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "quantgemm_kernels.appendices.misaligned",
        "--child",
        "fixed" if fixed else "naive",
        "--blocks",
        str(n_blocks),
        "--seed",
        str(seed),
    ]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
        out, err, rc, timed_out = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:

        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

        out, err, rc, timed_out = text(e.stdout), text(e.stderr), None, True
    return ChildResult(fixed, rc, out, err, time.perf_counter() - t0, timed_out)


def _child_main(which: str, n_blocks: int, seed: int) -> int:
    import torch

    mode = "two_halves" if which == "fixed" else "naive"
    q = make_blocks(n_blocks, seed)
    ref = reference_block_sums(q.cpu().numpy())
    torch.cuda.synchronize()
    y = block_sums(q, mode, allow_fault=True)
    # The launch returns at once; a fault inside the kernel is reported at the next synchronisation.
    print(f"launched mode {mode!r} on {n_blocks} blocks: no error at launch", flush=True)
    torch.cuda.synchronize()  # the naive kernel's fault is reported here
    got = y.cpu().numpy()
    print(
        json.dumps(
            {
                "mode": mode,
                "n_blocks": n_blocks,
                "equal": bool(np.array_equal(got, ref)),
                "max_abs_diff": float(np.max(np.abs(got - ref))) if got.size else 0.0,
            }
        ),
        flush=True,
    )
    return 0


# ---------------------------------------------------------------------------------------------
# What the legal loads cost
# ---------------------------------------------------------------------------------------------


def measure_bandwidth(n_blocks: int = 1 << 24, reps: int = 20, seed: int = 0) -> list[dict]:
    """Time the legal modes on ``n_blocks`` Q4_0 blocks (default 2^24: 302 MB, several times the
    L2 cache) with CUDA events; every mode's output is checked against the reference first.
    Bytes per call: 18 read + 4 written per block, the same for every mode. A last row, ``copy``,
    times a plain copy of the blocks: the bandwidth a streaming kernel can hope for."""
    import torch

    from ..bench import time_callable

    q = make_blocks(n_blocks, seed)
    ref = reference_block_sums(q.cpu().numpy())
    packed = repack(q)
    nbytes = n_blocks * (F.BLOCK_BYTES["q4_0"] + 4)
    rows = []
    for mode in LEGAL_MODES:
        got = block_sums(q, mode, repacked=packed).cpu().numpy()
        if not np.array_equal(got, ref):
            raise AssertionError(f"mode {mode!r} differs from the reference")
        t = time_callable(lambda m=mode: block_sums(q, m, repacked=packed), "cuda", warmup=3, reps=reps, min_time_s=0.2)
        rows.append(
            {
                "mode": mode,
                "loads": MODE_LOADS[mode],
                "n_blocks": n_blocks,
                "bytes": nbytes,
                "median_ms": t.median_s * 1e3,
                "min_ms": t.min_s * 1e3,
                "reps": t.reps,
                "gbps": nbytes / t.median_s / 1e9,
                "matches_reference": True,
            }
        )
    # The roof: a plain device-to-device copy of the same bytes (read + written).
    src = q.clone()
    dst = torch.empty_like(src)
    t = time_callable(lambda: dst.copy_(src), "cuda", warmup=3, reps=reps, min_time_s=0.2)
    rows.append(
        {
            "mode": "copy",
            "loads": "torch copy_ of the 18-byte blocks (the memory system's roof)",
            "n_blocks": n_blocks,
            "bytes": 2 * src.numel(),
            "median_ms": t.median_s * 1e3,
            "min_ms": t.min_s * 1e3,
            "reps": t.reps,
            "gbps": 2 * src.numel() / t.median_s / 1e9,
            "matches_reference": None,
        }
    )
    return rows


def record(out_dir=None, n_blocks: int = 1 << 24) -> Path:
    """Run both children and the bandwidth measurement on this GPU; write one JSON file."""
    import torch

    from ..bench import make_header, machine_slug

    if not torch.cuda.is_available():
        raise RuntimeError("record() needs a CUDA GPU")
    naive, fixed = run_in_child(fixed=False), run_in_child(fixed=True)
    children = {}
    for name, r in (("naive", naive), ("fixed", fixed)):
        d = asdict(r) | {"error_line": r.error_line, "report": r.report}
        d["stdout"], d["stderr"] = scrub_paths(r.stdout), scrub_paths(r.stderr)
        children[name] = d
    data = {
        "header": make_header("cuda", tool="quantgemm_kernels.appendices.misaligned"),
        "children": children,
        "bandwidth": measure_bandwidth(n_blocks),
    }
    out = Path(out_dir) if out_dir else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{machine_slug('cuda')}.json"
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    return path


def load_recorded(results_dir=None) -> dict | None:
    """The newest recorded GPU result (``record``'s JSON, newest by its header's date, not by file
    time, which a git checkout resets), or None when nothing was recorded."""
    d = Path(results_dir) if results_dir else RESULTS_DIR
    found = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        with open(p) as f:
            data = json.load(f)
        data["path"] = str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else p.name
        found.append(data)
    return max(found, key=lambda x: x["header"].get("date") or "") if found else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m quantgemm_kernels.appendices.misaligned", description=__doc__.split("\n")[0]
    )
    p.add_argument("--child", choices=("naive", "fixed"), help="(internal) run one kernel and report")
    p.add_argument("--blocks", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", action="store_true", help="run everything on this GPU and write the JSON")
    p.add_argument("--out", default=None, help=f"folder for --record (default {RESULTS_DIR.relative_to(ROOT)})")
    args = p.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.blocks, args.seed)
    if args.record:
        path = record(args.out)
        data = json.loads(path.read_text())
        naive = data["children"]["naive"]
        print(f"naive kernel: exit {naive['returncode']}: {naive['error_line']}")
        print(f"fixed kernel: {data['children']['fixed']['report']}")
        for r in data["bandwidth"]:
            print(f"{r['mode']:13s} {r['median_ms']:8.3f} ms {r['gbps']:8.1f} GB/s   {r['loads']}")
        print(f"wrote {path}")
        return 0
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
