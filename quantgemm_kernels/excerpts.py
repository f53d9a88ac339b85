"""Source excerpts and diffs for the notebooks (chapters 3, 4 and 6) and the tests.

A passage of a C++/CUDA source that the book shows is marked in the source by two comment lines,
named so that a notebook asks for it by name and not by the text of its first and last lines
(which any edit of the code can change)::

    // [excerpt: block_loop]
    for (int kb = 0; kb < nb; kb++) {
        ...
    }
    // [end excerpt: block_loop]

Names are letters, digits, ``_`` and ``-``, unique within a file; excerpts may nest or overlap
(each end names the excerpt it closes). Marker lines are comments only: they change no code, and
:func:`excerpt`, :func:`code_lines` and :func:`show_diff` leave them out of what they print.
``tests/test_excerpts.py`` checks that every file's markers are well-formed and that every
excerpt a notebook asks for exists.

A *source* is a registered kernel (a :class:`~quantgemm_kernels.registry.Kernel` or its name), a
path, or a file name under ``csrc/`` (``"mma.cuh"``, or ``"04_w4a8/1_naive.cu"`` where a name alone is
ambiguous); a file that moved to another folder of ``csrc/`` is still found by its name. Paths are
printed relative to the package (``csrc/cuda/06_decode_tensor_cores/mma.cuh``), so no machine's
directory reaches a notebook.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CSRC = PACKAGE / "csrc"
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")

#: The line an excerpt is printed under (Excerpt.__str__): its file under the package, its lines.
HEADER = re.compile(r"^--- (csrc/\S+), lines (\d+)-(\d+) ---$")
_OPEN = re.compile(r"^\s*//\s*\[excerpt:\s*(?P<name>[A-Za-z0-9_-]+)\s*\]\s*$")
_CLOSE = re.compile(r"^\s*//\s*\[end excerpt:\s*(?P<name>[A-Za-z0-9_-]+)\s*\]\s*$")
_MARKERISH = re.compile(r"\[\s*(end\s+)?excerpt\b")  # any line that tries to be a marker


class ExcerptError(ValueError):
    """A missing, unclosed or malformed excerpt marker, or a source that cannot be found."""


@dataclass(frozen=True)
class Excerpt:
    """Lines ``first``..``last`` (1-based, inclusive, the marker lines excluded) of ``path``."""

    path: Path
    name: str
    first: int
    last: int
    text: str

    def __str__(self) -> str:
        return f"--- {rel(self.path)}, lines {self.first}-{self.last} ---\n{self.text}"


def rel(path) -> str:
    """``path`` relative to the package (``csrc/cuda/common.cuh``), for printing."""
    path = Path(path).resolve()
    try:
        return path.relative_to(PACKAGE).as_posix()
    except ValueError:
        return path.as_posix()


def source_path(source) -> Path:
    """The file of a source: a Kernel (its ``.source``), a kernel name, a path, or a file name or
    relative path under ``csrc/`` (searched in every folder of ``csrc/`` if not where it says)."""
    if hasattr(source, "source"):
        return Path(source.source)
    if isinstance(source, str) and not source.endswith(SOURCE_SUFFIXES):
        from .registry import KERNELS  # only for kernel names: files need no registry

        if source in KERNELS:
            return Path(KERNELS[source].source)
        raise ExcerptError(f"{source!r} is neither a registered kernel nor a source file name")
    path = Path(source)
    if path.is_absolute():
        if path.is_file():
            return path
        raise ExcerptError(f"no file {path}")
    for base in (CSRC, PACKAGE):
        if (base / path).is_file():
            return base / path
    hits = sorted(p for p in CSRC.rglob(path.name) if p.as_posix().endswith("/" + path.as_posix()))
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ExcerptError(f"no source file {path.as_posix()!r} under {rel(CSRC)}/")
    raise ExcerptError(
        f"{path.as_posix()!r} is ambiguous under {rel(CSRC)}/: {[rel(h) for h in hits]}; give a longer path"
    )


def is_marker(line: str) -> bool:
    return bool(_OPEN.match(line) or _CLOSE.match(line))


def markers(source) -> dict[str, tuple[int, int]]:
    """Every excerpt of a file: ``{name: (first, last)}``, the 1-based lines between its markers.

    Raises :class:`ExcerptError`, naming the file and line, for a marker-like line that is not a
    well-formed marker, an end without its start, a name used twice, or a start never closed.
    """
    path = source_path(source)
    found: dict[str, tuple[int, int]] = {}
    open_at: dict[str, int] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not _MARKERISH.search(line):
            continue
        m_open, m_close = _OPEN.match(line), _CLOSE.match(line)
        if m_open:
            name = m_open["name"]
            if name in found or name in open_at:
                raise ExcerptError(f"{rel(path)}:{n}: excerpt {name!r} is marked twice in this file")
            open_at[name] = n
        elif m_close:
            name = m_close["name"]
            if name not in open_at:
                raise ExcerptError(f"{rel(path)}:{n}: '[end excerpt: {name}]' without its '[excerpt: {name}]'")
            start = open_at.pop(name)
            found[name] = (start + 1, n - 1)
        else:
            raise ExcerptError(
                f"{rel(path)}:{n}: malformed excerpt marker {line.strip()!r}; "
                "expected '// [excerpt: name]' or '// [end excerpt: name]' on a line of its own"
            )
    if open_at:
        name, n = next(iter(open_at.items()))
        raise ExcerptError(f"{rel(path)}:{n}: excerpt {name!r} is never closed ('// [end excerpt: {name}]')")
    for name, (first, last) in found.items():
        if last < first:
            raise ExcerptError(f"{rel(path)}: excerpt {name!r} is empty")
    return found


def excerpt(source, name: str) -> Excerpt:
    """The excerpt ``name`` of ``source``, without marker lines (of this or any other excerpt)."""
    path = source_path(source)
    found = markers(path)
    if name not in found:
        have = ", ".join(sorted(found)) or "none"
        raise ExcerptError(
            f"{rel(path)} has no excerpt {name!r} (markers '// [excerpt: {name}]' ... "
            f"'// [end excerpt: {name}]'); its excerpts: {have}"
        )
    first, last = found[name]
    lines = path.read_text().splitlines()[first - 1 : last]
    return Excerpt(path, name, first, last, "\n".join(line for line in lines if not is_marker(line)))


def show_excerpt(source, name: str) -> None:
    """Print excerpt ``name`` of ``source`` under a line with its file and line numbers."""
    print(excerpt(source, name))


def code_lines(source) -> list[str]:
    """The lines of a source file after its header comment, marker lines left out: what a diff of
    two kernels compares."""
    lines = source_path(source).read_text().splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("//") or not lines[i].strip()):
        i += 1
    return [line for line in lines[i:] if not is_marker(line)]


def _side(x) -> tuple[str, list[str]]:
    """(label, lines) of one side of a diff: a source (its code) or a (source, excerpt name) pair."""
    if isinstance(x, tuple):
        e = excerpt(*x)
        return f"{rel(e.path)} [{e.name}]", e.text.splitlines()
    path = source_path(x)
    return rel(path), code_lines(path)


def diff(old, new, context: int = 1) -> str:
    """Unified diff of two sources' code (header comments and markers left out), or of two
    excerpts given as ``(source, name)`` pairs."""
    (a_label, a), (b_label, b) = _side(old), _side(new)
    return "\n".join(difflib.unified_diff(a, b, a_label, b_label, n=context, lineterm=""))


def show_diff(old, new, context: int = 1) -> None:
    """Print :func:`diff`."""
    print(diff(old, new, context))


def all_markers(root: Path = CSRC) -> dict[Path, dict[str, tuple[int, int]]]:
    """:func:`markers` of every source file under ``root`` that has any (raises on the first bad one)."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        found = markers(path)
        if found:
            out[path] = found
    return out
