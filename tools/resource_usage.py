"""Record what the compiler gives each CUDA kernel of the package: registers, shared memory, spills.

    python tools/resource_usage.py                    # every .cu under quantgemm_kernels/csrc/cuda/
    python tools/resource_usage.py --out some.json    # elsewhere than the default file

Compiles each ``.cu`` file of ``quantgemm_kernels/csrc/cuda/`` on its own for ``sm_90a`` (H100,
H200) with the flags the package's build uses (``quantgemm_kernels/_build.py``: ``-O3 -lineinfo
-DWITH_CUDA -DQG_HAS_SM90A``, plus the ones torch's ``cpp_extension`` adds to every nvcc call) and
``-Xptxas -v``, and reads ptxas's report per kernel (``__global__`` function): registers per thread,
static shared memory, stack frame, spill stores and loads, barriers. Needs ``nvcc``, no GPU.

Writes ``bench_results/resource_usage/<arch>-nvcc-<version>.json``: a header (nvcc's version, the
flags, the host compiler, the commit of the sources) and one row per kernel instantiation, with its
mangled and demangled names. Chapters 1, 3 and 4 read it to compute theoretical occupancy
(``quantgemm_kernels.lanes.occupancy_table``); CI has no nvcc, so the file is committed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "quantgemm_kernels" / "csrc"
ARCH = "sm_90a"

#: The package's own nvcc flags (_build.build_config with CUDA and TORCH_CUDA_ARCH_LIST=9.0a) ...
PACKAGE_FLAGS = ["-O3", "-lineinfo", "-DWITH_CUDA", "-DQG_HAS_SM90A"]
#: ... and those torch.utils.cpp_extension adds to every .cu it compiles (COMMON_NVCC_FLAGS, the
#: standard of torch >= 2.10's headers, -fPIC). They change no resource count that matters here,
#: but the report is for the code the package builds.
TORCH_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
    "-std=c++20",
    "-Xcompiler",
    "-fPIC",
]

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def nvcc_version(nvcc: str) -> str:
    """``13.0.88`` from ``nvcc --version``'s last line (``... V13.0.88``)."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read the version from nvcc --version: {out!r}")
    return m.group(1)


def parse_ptxas(text: str) -> list[dict]:
    """One dict per entry function in ptxas -v's report: symbol, registers, smem_bytes (static),
    stack_bytes, spill_store_bytes, spill_load_bytes, barriers."""
    rows, cur = [], None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            cur = {"symbol": m.group(1), "arch": m.group(2)}
            rows.append(cur)
        elif cur is not None and (m := _PROPS.search(line)):
            cur.update(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)), spill_load_bytes=int(m.group(3)))
        elif cur is not None and (m := _USED.search(line)):
            cur.update(registers=int(m.group(1)), barriers=int(m.group(2) or 0), smem_bytes=int(m.group(3) or 0))
            cur = None  # the "Used" line closes an entry's report
    return rows


def demangle(symbols: list[str]) -> list[str]:
    """C++ names through c++filt (binutils); the mangled names where it is missing."""
    tool = shutil.which("c++filt")
    if not tool or not symbols:
        return list(symbols)
    out = subprocess.run([tool], input="\n".join(symbols), capture_output=True, text=True, check=True).stdout
    names = out.splitlines()
    return names if len(names) == len(symbols) else list(symbols)


def compile_report(nvcc: str, source: Path, flags: list[str], workdir: Path) -> list[dict]:
    """Compile one .cu to an object file with -Xptxas -v and return its parsed report."""
    cmd = [nvcc, *flags, f"-gencode=arch=compute_{ARCH[3:]},code={ARCH}", "-Xptxas", "-v"]
    cmd += ["-c", str(source), "-o", str(workdir / (source.stem + ".o"))]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source.relative_to(CSRC)}:\n{res.stderr[-3000:]}")
    return parse_ptxas(res.stdout + res.stderr)


def git_commit() -> tuple[str, bool]:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--", "quantgemm_kernels/csrc"))
    return commit, dirty


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: bench_results/resource_usage/...)")
    ap.add_argument("sources", nargs="*", help=".cu files (default: every one under csrc/cuda/)")
    args = ap.parse_args(argv)

    version = nvcc_version(args.nvcc)
    sources = [Path(s).resolve() for s in args.sources] or sorted((CSRC / "cuda").rglob("*.cu"))
    flags = PACKAGE_FLAGS + TORCH_FLAGS
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for src in sources:
            report = compile_report(args.nvcc, src, flags, Path(tmp))
            for r, name in zip(report, demangle([r["symbol"] for r in report])):
                rows.append({"file": src.relative_to(CSRC).as_posix(), "kernel": name, **r})
            print(f"{src.relative_to(CSRC)}: {len(report)} kernels", file=sys.stderr)
    host = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()
    commit, dirty = git_commit()
    record = {
        "header": {
            "what": "ptxas -v per kernel: registers per thread, static shared memory (bytes), spills",
            "arch": ARCH,
            "nvcc": version,
            "host_compiler": host[0] if host else "",
            "flags": flags,
            "command": "python tools/resource_usage.py",
            "date": datetime.date.today().isoformat(),
            "git_commit": commit,
            "csrc_dirty": dirty,
        },
        "columns": {
            "file": "the source, relative to quantgemm_kernels/csrc/",
            "kernel": "the __global__ function, demangled (template arguments included)",
            "symbol": "its mangled name",
            "registers": "registers per thread",
            "smem_bytes": "static shared memory per CTA (dynamic shared memory is set at launch)",
            "stack_bytes": "local-memory stack frame per thread",
            "spill_store_bytes": "bytes spilled to local memory per thread",
            "spill_load_bytes": "bytes reloaded from local memory per thread",
            "barriers": "named barriers the kernel uses",
        },
        "rows": rows,
    }
    out = args.out or ROOT / "bench_results" / "resource_usage" / f"{ARCH}-nvcc-{version}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{len(rows)} kernels -> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
