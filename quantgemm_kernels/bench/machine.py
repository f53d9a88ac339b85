"""What produced a number: the machine (GPU or CPU model, threads, physical cores), how busy the
host was, and the repository's commit.

Every timing the course prints or records is titled with :func:`machine_name` (or
:func:`cpu_name` for CPU figures on a machine with a GPU); CPU cells time with
:func:`physical_cores` threads and print :func:`host_load` beside their times. Results folders are
named by :func:`machine_slug`; result headers carry :func:`git_commit`.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import torch

#: The repository's root: results go under ``ROOT / "bench_results"``.
ROOT = Path(__file__).resolve().parents[2]


def machine_name(device: str = "cpu") -> str:
    """A short, honest description of what produced a number: the GPU's name, or the CPU's."""
    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, torch {torch.__version__})"
    return cpu_name()


def cpu_name(threads: int | None = None) -> str:
    """The CPU behind a CPU number, never the GPU: model, the threads in use (torch's count unless
    ``threads`` is given) and torch's version. Title CPU figures and tables with it."""
    n = torch.get_num_threads() if threads is None else threads
    return f"{cpu_model()}, {n} thread{'' if n == 1 else 's'} (torch {torch.__version__})"


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else what ``platform`` knows."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


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
            out = subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET"], capture_output=True, text=True, timeout=10).stdout
            rows = [line.split(",") for line in out.splitlines() if line and not line.startswith("#")]
            n = len({(r[2], r[1]) for r in rows if allowed is None or int(r[0]) in allowed})
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            n = 0
    if not n:
        n = len(allowed) if allowed else (os.cpu_count() or 1)
    return max(1, n)


def cpu_last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The size of the largest (last-level) CPU cache this Linux reports in sysfs, shared or not; the
    ``default`` (32 MiB) where it reports none. The CPU's cold regime rotates weight copies past it."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return max(sizes) if sizes else default


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


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:60] or "unknown"


def machine_slug(device: str = "cpu") -> str:
    """A folder name for results: the GPU's name, or the CPU model and thread count."""
    if device == "cuda" and torch.cuda.is_available():
        return _slug(torch.cuda.get_device_name())
    return f"{_slug(cpu_model())}-{torch.get_num_threads()}t"


def git_commit() -> tuple[str | None, bool | None]:
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
    return None, None
