"""What a sweep times: the entries (our registered kernels and llama.cpp's own ``mul_mat``), the
naive kernel each speedup is measured against, and the shapes.

An entry is an :class:`Entry`: a registered :class:`~quantgemm_kernels.registry.Kernel`'s fields
plus the ``side`` it comes from, ``"ours"`` or ``"llama.cpp"``. The side is set where entries are
made (:func:`entry` for a registered kernel, :func:`ggml_entries` for llama.cpp's), and everything
downstream (how a row is timed, its baseline, its ``source`` column) reads the field, never the
name. Shapes are (M, N, K) = llama.cpp's (m, n, k): M output features, N tokens, K reduction.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re

from .. import formats as F
from ..registry import KERNELS, Kernel

#: Where an entry comes from: a kernel of this course, or llama.cpp's ggml ``mul_mat``.
SIDES = ("ours", "llama.cpp")


@dataclasses.dataclass(frozen=True)
class Entry(Kernel):
    """One thing a sweep times: a kernel's fields (name, device, formats, chapter, ...) and its side.
    An entry of side "ours" passes wherever a registered kernel does (``gemm(A, W, entry)``)."""

    side: str = "ours"  #: "ours" or "llama.cpp"; a result row calls it ``source``

    def __post_init__(self):
        if self.side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {self.side!r}")


def entry(kernel) -> Entry:
    """The entry of a registered kernel (a name or a :class:`Kernel`), side "ours"; an entry as it is."""
    if isinstance(kernel, Entry):
        return kernel
    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    return Entry(**{f.name: getattr(k, f.name) for f in dataclasses.fields(Kernel)}, side="ours")


def ggml_entries(device: str = "cpu") -> list[Entry]:
    """llama.cpp's own mul_mat as sweep entries ``ggml_<device>_<wfmt>``, side "llama.cpp", with the
    activation format ggml quantizes to itself (CPU: the type traits' vec_dot_type, Q8_0; CUDA: Q8_1)."""
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
        out.append(Entry(f"ggml_{device}_{wfmt}", device, wfmt, afmt, 5, "llama.cpp's ggml mul_mat", side="llama.cpp"))
    if device == "cpu":
        # what llama.cpp's loader does to Q4_0 on the CPU: the weights repacked into interleaved rows
        # (llamacpp.MulMatRunner(repack=True)); a row of status "error" says why where ggml cannot
        title = "llama.cpp's ggml mul_mat, weights repacked as its loader does"
        out.append(Entry("ggml_cpu_q4_0_repack", "cpu", "q4_0", "q8_0", 5, title, side="llama.cpp"))
    return out


def _baseline(device: str, wfmt: str, afmt: str, side: str) -> str:
    afmt = "q8_1" if side == "llama.cpp" and wfmt != "f32" else afmt
    return f"{device}_{wfmt}_{afmt}_naive"


def baseline_name(k: Kernel) -> str:
    """The naive kernel a row's speedup is measured against: same device and formats. llama.cpp's
    rows use our naive kernel with the same weights and Q8_1 activations (the nearest we have)."""
    return _baseline(k.device, k.wfmt, k.afmt, getattr(k, "side", "ours"))


def select_kernels(device: str | None = None, patterns=None, ggml: bool = False, baseline: bool = True) -> list[Entry]:
    """Registered kernels on ``device`` ("cpu", "cuda" or None for both) whose names match any of
    the glob ``patterns`` (a comma-separated string or a list), in teaching order; with
    ``ggml=True`` also llama.cpp's mul_mat entries; with ``baseline=True`` the naive kernel each
    speedup needs is added even where the patterns leave it out."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p]
    candidates = [entry(k) for k in KERNELS.values() if device in (None, "all", k.device)]
    if ggml:
        for dev in ("cpu", "cuda"):
            if device in (None, "all", dev):
                candidates += ggml_entries(dev)
    chosen = [k for k in candidates if not patterns or any(fnmatch.fnmatchcase(k.name, p) for p in patterns)]
    if patterns and not chosen:
        raise ValueError(f"no kernel matches {patterns}; the names are: {', '.join(k.name for k in candidates)}")
    if baseline:
        names = {k.name for k in chosen}
        extra = [entry(b) for b in dict.fromkeys(baseline_name(k) for k in chosen) if b in KERNELS and b not in names]
        order = {name: i for i, name in enumerate(KERNELS)}
        chosen = sorted(extra + chosen, key=lambda k: (k.side != "ours", order.get(k.name, 0)))
    return chosen


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
