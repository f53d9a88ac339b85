"""Compile the C++/CUDA kernels with ``torch.utils.cpp_extension.load`` on first use.

Three extensions, each built and cached on its own by :func:`build_extension` (a name, a torch
library namespace, its C++ and CUDA sources) and loaded the first time it is used:

* the **core** (:func:`load_extension`): ``bindings.cpp``, every ``.cpp`` under ``cpu/`` and ``.cu``
  under ``cuda/``, the chapters' step folders included (``cuda/04_w4a8/3_dp4a.cu``), and ``model/``
  (chapter 7's decode layer, C++ and CUDA); quantize, dequantize, gemm and decode_layer under
  ``torch.ops.quantgemm``. ``api.py`` is its caller.
* **appendix B** (:func:`load_appendix_b`): ``appendix_b/``, the misaligned-load demonstration under
  ``torch.ops.quantgemm_appendix_b``. CUDA only: without a CUDA build it raises instead of compiling.
* **appendix C** (:func:`load_appendix_c`): ``appendix_c/``, ``conv1d_silu_int8`` under
  ``torch.ops.quantgemm_appendix_c``, CPU and CUDA.

What this adds to a bare ``load()`` call, and why:

* **Source selection.** A CPU-only torch cannot compile ``.cu`` files (``CUDA_HOME`` is ``None``
  there), so the CUDA sources join the build only when a GPU, a CUDA torch and ``nvcc`` are all
  present. ``QUANTGEMM_NO_CUDA=1`` forces a CPU-only build.
* **A cache keyed by every file a build reads.** torch's own check hashes the listed sources only,
  so an edited header would be missed. We hash an extension's sources and every header they
  include, directly or through other headers (``check.h``, ``formats.h``, the ``.def`` tables),
  the flags, the torch and Python versions, and build into a directory named after that hash.
* **No hang on a stale lock.** torch serialises builds with a ``lock`` file that a killed build
  leaves behind, after which every ``load()`` waits forever. We take an OS lock (``flock``, freed
  by the kernel when a process dies) around the build; whoever holds it may delete torch's file.
  Two notebooks building at once: the second waits for the first, then loads its result.
* **Step files of the same name** (``cpu/01_fp32/1_naive.cpp``, ``cpu/04_w4a8/1_naive.cpp``): torch
  names an object file after its source's file name, so a source whose name another source of the
  same build shares is compiled through a one-line file in the build directory that includes it
  (:func:`object_safe_sources`); the compiler still reports, and the cache key still hashes, the file itself.
* **Threads.** torch's OpenMP builds implement ``at::parallel_for`` in their headers; an extension
  compiled without OpenMP runs it on one thread. ``-fopenmp`` joins the flags where the compiler
  has it (:func:`_openmp_flags`); elsewhere (Apple clang) ``csrc/parallel.h`` runs the chunks on
  std::threads. Either way ``torch.set_num_threads`` sets the CPU kernels' threads.
* **The instruction set** (:func:`_cpu_arch_flags`): this CPU's by default; ``QUANTGEMM_CPU_ARCH``
  picks another (``x86-64-v3``: AVX2 only), built into a cache folder of its own (the flags are
  part of the key).
* **One status line** while compiling, and a clear message when no compiler is found.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

CSRC = Path(__file__).resolve().parent / "csrc"
_loaded: dict[str, dict] = {}  # extension name -> what build_extension returned


class Extension(NamedTuple):
    """One extension: its name (the cache folder's and library's prefix), the torch library
    namespace its bindings register, and its sources as glob patterns relative to ``csrc/``
    (``**`` for a folder and every folder below it)."""

    name: str
    namespace: str
    sources: tuple[str, ...]
    cuda_sources: tuple[str, ...] = ()
    cuda_only: bool = False  #: no CPU build: without CUDA, loading it raises
    title: str = "kernels"  #: for the status line and errors


CORE = Extension("core", "quantgemm", ("bindings.cpp", "cpu/**/*.cpp", "model/*.cpp"), ("cuda/**/*.cu", "model/*.cu"))
APPENDIX_B = Extension(
    "appendix_b",
    "quantgemm_appendix_b",
    ("appendix_b/*.cpp",),
    ("appendix_b/*.cu",),
    cuda_only=True,
    title="appendix B kernels",
)
APPENDIX_C = Extension(
    "appendix_c", "quantgemm_appendix_c", ("appendix_c/*.cpp",), ("appendix_c/*.cu",), title="appendix C kernels"
)


def cache_root() -> Path:
    """Where builds live: ``$QUANTGEMM_CACHE`` or ``~/.cache/quantgemm_kernels`` (never in git)."""
    env = os.environ.get("QUANTGEMM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "quantgemm_kernels"


def cuda_build_possible() -> bool:
    """True when the CUDA sources can be compiled and run here."""
    if os.environ.get("QUANTGEMM_NO_CUDA") == "1":
        return False
    import torch
    from torch.utils import cpp_extension as ce

    return bool(
        torch.cuda.is_available()
        and torch.version.cuda is not None
        and ce.CUDA_HOME is not None
        and os.path.exists(os.path.join(ce.CUDA_HOME, "bin", "nvcc"))
    )


def _cpu_arch_flags() -> list[str]:
    """The instruction set the SIMD kernels are compiled for (they choose their path at compile time).

    Default ``native``: ``-march=native`` on x86 (AVX-512 VNNI or AVX2, as the CPU has them);
    on ARM ``-mcpu=native`` (GCC, Linux), or ``-mcpu=apple-m1`` on macOS (Apple clang; every Apple
    silicon Mac has M1's NEON dot product, and the binary runs on all of them).
    ``QUANTGEMM_CPU_ARCH=portable``: no flag, a build that runs on any CPU of this architecture (x86:
    the portable loops; aarch64: NEON without the dot product). Anything else is passed as
    ``-march=<value>``: ``x86-64-v3`` builds the AVX2-only variant on an AVX-512 machine,
    ``armv8.2-a+dotprod`` an ARM build with ``sdot``."""
    arch = os.environ.get("QUANTGEMM_CPU_ARCH", "native")
    if arch == "portable":
        return []
    machine = platform.machine().lower()
    if arch != "native":
        return [f"-march={arch}"]
    if machine in ("x86_64", "amd64"):
        return ["-march=native"]  # picks AVX2 / AVX-512 VNNI where the CPU has them
    if machine in ("aarch64", "arm64"):
        return ["-mcpu=apple-m1"] if sys.platform == "darwin" else ["-mcpu=native"]
    return []


@functools.lru_cache(maxsize=None)
def _openmp_flags(cxx: str) -> tuple[str, ...]:
    """``-fopenmp`` where the C++ compiler has OpenMP (GCC does, Apple clang does not), else nothing.

    torch's OpenMP builds implement ``at::parallel_for`` inline in their headers as
    ``#pragma omp parallel``: compiled without OpenMP it runs every chunk on the calling thread.
    With ``-fopenmp`` it runs on torch's own OpenMP threads (the runtime torch has loaded, sized by
    ``torch.set_num_threads``); without, ``csrc/parallel.h`` runs the same chunks on std::threads.
    ``QUANTGEMM_OPENMP=0`` leaves the flag out (to build and test that fallback here)."""
    if os.environ.get("QUANTGEMM_OPENMP", "1") == "0":
        return ()
    probe = b"#include <omp.h>\nint main() { return omp_get_max_threads() > 0 ? 0 : 1; }\n"
    with tempfile.TemporaryDirectory() as d:
        try:
            r = subprocess.run(
                [cxx, "-fopenmp", "-x", "c++", "-", "-o", os.path.join(d, "probe")],
                input=probe,
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            return ()
    return ("-fopenmp",) if r.returncode == 0 else ()


def _glob(patterns) -> list[Path]:
    return [f for pat in patterns for f in sorted(CSRC.glob(pat))]


def build_config(with_cuda: bool, ext: Extension = CORE) -> dict:
    """The sources and flags of one build of ``ext`` (the core by default)."""
    sources = _glob(ext.sources)
    if with_cuda:
        sources += _glob(ext.cuda_sources)
    # -ffp-contract=off: no silent fused multiply-adds, so the quantizers round exactly as
    # llama.cpp's C reference does; kernels that want an FMA write fmaf() themselves.
    # No -std flag: torch's cpp_extension passes the standard its headers were built for (C++20
    # from torch 2.10 on); a -std=c++17 after it would compile torch's headers in another mode.
    openmp = list(_openmp_flags(os.environ.get("CXX", "c++")))
    cflags = ["-O3", "-ffp-contract=off", *_cpu_arch_flags(), *openmp]
    cuda_flags = ["-O3", "-lineinfo"]
    # QUANTGEMM_NVCC_FLAGS: extra nvcc flags for experiments (e.g. "-Xptxas -v" or a -D switch); they are
    # part of the fingerprint, so each set of flags gets its own build directory.
    cuda_flags += os.environ.get("QUANTGEMM_NVCC_FLAGS", "").split()
    arch_list = _cuda_arch_list() if with_cuda else ""
    if with_cuda:
        cflags.append("-DWITH_CUDA")
        cuda_flags.append("-DWITH_CUDA")
        if "9.0a" in {a.split("+")[0] for a in arch_list.replace(" ", ";").split(";")}:
            cuda_flags.append("-DQG_HAS_SM90A")  # the wgmma kernels have code (else their launchers refuse)
    return {
        "sources": sources,
        "cflags": cflags,
        "ldflags": openmp,
        "cuda_flags": cuda_flags,
        "with_cuda": with_cuda,
        "arch_list": arch_list,
    }


def _cuda_arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST for the CUDA build: the user's if set; else, when every visible GPU is
    compute capability 9.0 (H100, H200), "9.0a": the arch-specific target whose code may use wgmma
    (chapter 6) and runs on 9.0 only. Otherwise empty: torch picks the visible GPUs' architectures."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    if env:
        return env
    import torch

    caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    return "9.0a" if caps == {(9, 0)} else ""


_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def files_read(sources) -> list[Path]:
    """The sources and every file they ``#include "..."``, directly or through other headers,
    found next to the including file (as the compiler looks first) or under ``csrc/``."""
    seen: set[Path] = set()
    todo = [Path(s).resolve() for s in sources]
    while todo:
        f = todo.pop()
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        for inc in _QUOTED_INCLUDE.findall(f.read_bytes()):
            name = inc.decode()
            for cand in (f.parent / name, CSRC / name):
                if cand.is_file():
                    todo.append(cand.resolve())
                    break
    return sorted(seen)


def _fingerprint(cfg: dict) -> str:
    import torch

    h = hashlib.sha256()
    csrc = CSRC.resolve()
    for f in files_read(cfg["sources"]):
        h.update(str(f.relative_to(csrc) if f.is_relative_to(csrc) else f).encode())
        h.update(f.read_bytes())
    names = [str(Path(s).resolve().relative_to(csrc)) for s in cfg["sources"]]
    h.update(repr((cfg["cflags"], cfg["cuda_flags"], names)).encode())
    h.update(f"{torch.__version__}|{sys.version_info[:2]}|{cfg.get('arch_list', '')}".encode())
    h.update(platform.node().encode() if "-march=native" in cfg["cflags"] else b"")  # native = this CPU
    return h.hexdigest()[:16]


def _check_compiler(with_cuda: bool) -> None:
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None and shutil.which("g++") is None:
        raise RuntimeError(
            "quantgemm_kernels: no C++ compiler found (looked for $CXX, c++, g++). Install one "
            "(Debian/Ubuntu: apt-get install build-essential) to build the kernels. The numpy "
            "reference, quantgemm_kernels.reference and quantgemm_kernels.formats, works without it."
        )
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401  (the pip wheel puts a ninja binary on PATH)
        except ImportError:
            raise RuntimeError("quantgemm_kernels: ninja is required to build (pip install ninja)") from None


def build_tag(cfg: dict, ext: Extension = CORE) -> str:
    """The cache folder of one build: extension, variant (cpu or cuda) and the fingerprint."""
    return f"{ext.name}-{'cuda' if cfg['with_cuda'] else 'cpu'}-{_fingerprint(cfg)}"


def build_extension(ext: Extension) -> dict:
    """Build ``ext`` if its cached build is missing or stale, load it, and return
    ``{"ops", "with_cuda", "path"}`` (``ops``: its ``torch.ops`` namespace). Loaded once per process."""
    if ext.name in _loaded:
        return _loaded[ext.name]
    import torch

    with_cuda = cuda_build_possible()
    if ext.cuda_only and not with_cuda:
        why = (
            "QUANTGEMM_NO_CUDA=1 is set"
            if os.environ.get("QUANTGEMM_NO_CUDA") == "1"
            else "it needs a CUDA GPU, a CUDA build of PyTorch and nvcc"
        )
        raise RuntimeError(f"quantgemm_kernels: the {ext.title} are CUDA only and cannot be built here ({why})")
    cfg = build_config(with_cuda, ext)
    tag = build_tag(cfg, ext)
    variant = tag.rsplit("-", 1)[0]  # e.g. core-cuda, appendix_c-cpu
    root = cache_root()
    build_dir = root / tag
    build_dir.mkdir(parents=True, exist_ok=True)
    # The library name stays the same across builds: it is part of every compile command, and a
    # changed command makes ninja recompile everything (see _seed_from_previous_build).
    device_kind = "cuda" if with_cuda else "cpu"
    name = f"quantgemm_{device_kind}" if ext.name == "core" else f"quantgemm_{ext.name}_{device_kind}"
    so_path = build_dir / f"{name}.so"
    done_marker = build_dir / "built.ok"

    with open(root / f"{tag}.flock", "w") as lockfile:
        fcntl.flock(lockfile, fcntl.LOCK_EX)  # released by the OS if this process dies
        try:
            if not (done_marker.exists() and so_path.exists()):
                _check_compiler(with_cuda)
                stale = build_dir / "lock"  # torch's FileBaton; only a dead build can have left it
                if stale.exists():
                    stale.unlink()
                _seed_from_previous_build(build_dir, variant)
                label = "CUDA" if ext.cuda_only else "CPU + CUDA" if with_cuda else "CPU"
                _compile(cfg, name, build_dir, with_cuda, f"{label} {ext.title}")
                done_marker.write_text(tag)
            torch.ops.load_library(str(so_path))
        finally:
            fcntl.flock(lockfile, fcntl.LOCK_UN)
    _loaded[ext.name] = {"ops": getattr(torch.ops, ext.namespace), "with_cuda": with_cuda, "path": str(so_path)}
    return _loaded[ext.name]


def load_extension() -> dict:
    """Build (if needed) and load the core extension; return ``{"ops", "with_cuda", "path"}``."""
    return build_extension(CORE)


def load_appendix_b() -> dict:
    """Appendix B's misaligned-load demonstration (CUDA only; raises RuntimeError elsewhere)."""
    return build_extension(APPENDIX_B)


def load_appendix_c() -> dict:
    """Appendix C's conv1d_silu_int8 operator (CPU, and CUDA where it can be built)."""
    return build_extension(APPENDIX_C)


def _seed_from_previous_build(build_dir: Path, variant: str) -> None:
    """Copy the newest finished build's objects and ninja state into a new build directory, so that
    ninja recompiles only the files that changed (it tracks header dependencies itself) instead of
    every file after each edit. The directory name, not ninja, decides what counts as a new build."""
    if any(build_dir.glob("*.o")):
        return
    previous = [d for d in build_dir.parent.glob(f"{variant}-*") if d != build_dir and (d / "built.ok").exists()]
    if not previous:
        return
    src = max(previous, key=lambda d: (d / "built.ok").stat().st_mtime)
    for f in [*src.glob("*.o"), *src.glob("*.o.d"), *src.glob(".ninja_*")]:
        shutil.copy2(f, build_dir / f.name)


def object_safe_sources(sources, build_dir: Path) -> list[Path]:
    """The sources to hand to torch's ``load``, which names each object file after its source's
    file name (``1_naive.cpp`` -> ``1_naive.o``; ``.cu`` -> ``1_naive.cuda.o``). A source whose
    object name another source shares is replaced by ``build_dir/sources/<its path under csrc/,
    "/" as "__">``, a file that only includes it: its ``#include "..."`` lines still resolve next to
    the real file, and compiler messages name it."""
    sources = [Path(s) for s in sources]
    obj = lambda s: (s.stem, s.suffix == ".cu")  # noqa: E731  (torch: name.o, or name.cuda.o for .cu)
    counts: dict = {}
    for s in sources:
        counts[obj(s)] = counts.get(obj(s), 0) + 1
    out = []
    for s in sources:
        if counts[obj(s)] == 1:
            out.append(s)
            continue
        real = s.resolve()
        relname = real.relative_to(CSRC.resolve()) if real.is_relative_to(CSRC.resolve()) else Path(real.name)
        shim = build_dir / "sources" / "__".join(relname.parts)
        text = f'#include "{real.as_posix()}"\n'
        shim.parent.mkdir(parents=True, exist_ok=True)
        if not shim.exists() or shim.read_text() != text:  # rewritten only when it changes: ninja keeps its objects
            shim.write_text(text)
        out.append(shim)
    return out


def _compile(cfg: dict, name: str, build_dir: Path, with_cuda: bool, what: str) -> None:
    from torch.utils.cpp_extension import load

    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    print(
        f"quantgemm_kernels: compiling the {what} (first use after a source change) ...",
        end="",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    saved_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if cfg.get("arch_list"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = cfg["arch_list"]
    try:
        load(
            name=name,
            sources=[str(s) for s in object_safe_sources(cfg["sources"], build_dir)],
            extra_cflags=cfg["cflags"],
            extra_ldflags=cfg.get("ldflags", []),
            extra_cuda_cflags=cfg["cuda_flags"],
            build_directory=str(build_dir),
            with_cuda=with_cuda,
            is_python_module=False,
            verbose=False,
        )
    except Exception:
        print(" failed", file=sys.stderr, flush=True)
        raise
    finally:
        if saved_arch is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved_arch
    print(f" done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
