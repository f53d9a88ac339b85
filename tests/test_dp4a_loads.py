"""The load counts in the header of cuda/04_w4a8/3_dp4a.cu, checked twice: derived from the block
layouts (``formats.BLOCK_DTYPES``, the mirrors of the C structs), and counted in the PTX that nvcc
makes of the naive and the DP4A kernels (skipped where nvcc is missing; no GPU needed).

The header's table says, per block pair and thread, how many load instructions read the quants of
each format in the naive kernel (one per byte) and in the DP4A kernel (words of the widest width
the block's alignment allows, at most the 32 bits ``__dp4a`` takes), and the ratio.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from quantgemm_kernels import formats
from quantgemm_kernels.registry import KERNELS

CSRC = Path(__file__).resolve().parent.parent / "quantgemm_kernels" / "csrc"
ROW = re.compile(
    r"^//\s+(Q\d_\d)\s+(\d+)\s+(\d+) x 8-bit\s+(\d+) x (\d+)-bit \(byte (\d+) of (\d+)\)"
    r"\s+(\d+) -> (\d+)\s+\((\d+)x fewer\)\s*$"
)


def _source(kernel: str) -> Path:
    """The step file of a registered kernel (registry.py names it)."""
    return KERNELS[kernel].source


def _header_rows() -> dict[str, tuple[int, ...]]:
    rows = {}
    for line in _source("cuda_q4_0_q8_1_dp4a").read_text().splitlines():
        if not line.startswith("//"):
            break  # the header ends at the first line of code
        m = ROW.match(line)
        if m:
            rows[m.group(1).lower()] = tuple(int(g) for g in m.groups()[1:])
    return rows


def _layout(fmt: str) -> tuple[int, int, int, int]:
    """(quant bytes, their offset in the block, block bytes, widest load width in bytes <= 4)."""
    dt = formats.BLOCK_DTYPES[fmt]
    qs_dtype, offset = dt.fields["qs"][:2]
    width = 4
    while offset % width or dt.itemsize % width:  # rows start 16-byte aligned, blocks follow back to back
        width //= 2
    return qs_dtype.itemsize, offset, dt.itemsize, width


def test_header_has_one_row_per_format():
    assert set(_header_rows()) == {"q8_1", "q4_0", "q8_0"}


@pytest.mark.parametrize("fmt", ["q8_1", "q4_0", "q8_0"])
def test_header_counts_follow_from_the_block_layout(fmt):
    qs_bytes, offset, block_bytes, width = _layout(fmt)
    got = _header_rows()[fmt]
    want = (qs_bytes, qs_bytes, qs_bytes // width, 8 * width, offset, block_bytes, qs_bytes, qs_bytes // width, width)
    assert got == want, f"{fmt}: header says {got}, the layout gives {want}"


# ---- the same counts in the compiled code -------------------------------------------------------

LOAD = re.compile(r"^\s*ld\.global(?:\.nc)?(\.v\d)?\.[usb](8|16|32|64)\s")
SCALES = {"w_q4_0": 3, "w_q8_0": 2}  # fp16 loads per block pair: d_w, d_a, and s_a for Q4_0 only
WEIGHT = {"w_q4_0": "q4_0", "w_q8_0": "q8_0"}


def _ptx_counts(source: Path, tmp_path: Path) -> dict[str, dict[str, int]]:
    """Per kernel instantiation (w_q4_0, w_q8_0): global loads by width, and dp4a instructions."""
    includes = sorted({p.parent for p in CSRC.rglob("*.h*")} | {source.parent})
    out = tmp_path / (source.stem + ".ptx")
    cmd = [
        shutil.which("nvcc"),
        "-ptx",
        "-O3",
        "-arch=sm_80",
        "-std=c++17",
        *[f"-I{d}" for d in includes],
        str(source),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    counts: dict[str, dict[str, int]] = {}
    entry = None
    for line in out.read_text().splitlines():
        if ".entry" in line:
            entry = next((w for w in SCALES if w in line), None)
            counts.setdefault(entry, {})
            continue
        if entry is None:
            continue
        c = counts[entry]
        m = LOAD.match(line)
        if m:
            assert m.group(1) is None, f"vector load in {source.name} ({entry}): {line.strip()}"
            c[f"u{m.group(2)}"] = c.get(f"u{m.group(2)}", 0) + 1
        elif line.strip().startswith("dp4a."):
            c["dp4a"] = c.get("dp4a", 0) + 1
    return counts


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (no GPU needed)")
def test_ptx_loads_match_the_header(tmp_path):
    """nvcc may unroll the block loop, so the counts are whole multiples of one block pair's: the
    scales say how many block bodies the PTX holds, the quants' loads must then be the header's."""
    rows = _header_rows()
    naive = _ptx_counts(_source("cuda_q4_0_q8_1_naive"), tmp_path)
    dp4a = _ptx_counts(_source("cuda_q4_0_q8_1_dp4a"), tmp_path)
    for wf, fmt in WEIGHT.items():
        w_naive, w_dp4a, a_naive, a_dp4a = rows[fmt][6], rows[fmt][7], rows["q8_1"][6], rows["q8_1"][7]
        # naive: every quant byte is one 8-bit load, the scales are the only 16-bit loads
        c = naive[wf]
        bodies, rest = divmod(c.get("u16", 0), SCALES[wf])
        assert bodies >= 1 and rest == 0 and c.get("u32", 0) == 0, (wf, c)
        assert c.get("u8", 0) == bodies * (w_naive + a_naive), (wf, c, bodies)
        # dp4a: Q8_1 quants as 32-bit words, weight quants as 16-bit halves, no byte loads
        c = dp4a[wf]
        bodies, rest = divmod(c.get("u32", 0), a_dp4a)
        assert bodies >= 1 and rest == 0 and c.get("u8", 0) == 0, (wf, c)
        assert c.get("u16", 0) == bodies * (w_dp4a + SCALES[wf]), (wf, c, bodies)
        assert c.get("dp4a", 0) == bodies * 8, (wf, c, bodies)
