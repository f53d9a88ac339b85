"""Appendix B's demonstration: block layouts, the two-halves load, and the misaligned-address fault.

The layout and load arithmetic run everywhere (numpy). The kernels need a GPU: every legal load
must reproduce the reference bit for bit, and the naive 32-bit load must fail, in a child process,
with CUDA's "misaligned address".
"""

import numpy as np
import pytest
import torch

from quantgemm_kernels import formats as F
from quantgemm_kernels import _build
from quantgemm_kernels.appendices import misaligned as mis

from conftest import requires_cuda


def test_layout_offsets_and_alignment():
    table = {r["format"]: r for r in mis.layout_table()}
    assert {f: (r["block_bytes"], r["qs_offset"]) for f, r in table.items()} == {
        "q4_0": (18, 2),
        "q8_0": (34, 2),
        "q8_1": (36, 4),
    }
    # in an array of blocks: Q4_0/Q8_0 quants only 2-byte aligned, Q8_1 quants 4-byte aligned
    assert table["q4_0"]["qs_alignment"] == 2 and table["q8_0"]["qs_alignment"] == 2
    assert table["q8_1"]["qs_alignment"] == 4
    assert table["q4_0"]["first_qs_addresses_mod_4"] == [2, 0, 2, 0]


def test_lowest_alignment():
    assert mis.lowest_alignment([256, 512]) == 256
    assert mis.lowest_alignment([258]) == 2
    assert mis.lowest_alignment([4, 6, 8]) == 2


def test_two_halves_build_the_same_word_as_a_32_bit_load():
    rng = np.random.default_rng(0)
    qs = rng.integers(0, 256, (100, 16), dtype=np.uint8)
    assert np.array_equal(mis.words_from_halves(qs), qs.view("<u4"))


def test_reference_block_sums_is_the_dequantized_sum():
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    q = F.quantize(x, "q4_0")
    ref = mis.reference_block_sums(q)
    want = F.dequantize(q, "q4_0").reshape(-1, F.QK).astype(np.float64).sum(axis=1)
    assert ref.dtype == np.float32 and ref.shape == (8 * 256 // 32,)
    assert np.array_equal(ref.astype(np.float64), want)  # exact: no rounding anywhere


def test_naive_mode_is_refused_in_this_process():
    q = torch.zeros(18, dtype=torch.uint8)
    with pytest.raises(ValueError, match="run_in_child"):
        mis.block_sums(q, "naive")
    with pytest.raises(ValueError, match="mode must be one of"):
        mis.block_sums(q, "aligned")


def test_kernels_without_cuda_raise_a_clear_error(monkeypatch):
    """Appendix B's extension is CUDA only: without a CUDA build, loading it says so (and compiles nothing)."""
    monkeypatch.setenv("QUANTGEMM_NO_CUDA", "1")
    monkeypatch.setattr(_build, "_loaded", {})
    with pytest.raises(RuntimeError, match="appendix B kernels are CUDA only.*QUANTGEMM_NO_CUDA"):
        mis._ops()
    q = torch.zeros(18, dtype=torch.uint8)  # a CPU tensor is refused before that, as a ValueError
    with pytest.raises(ValueError, match="run on a CUDA GPU"):
        mis.block_sums(q, "two_halves")


@requires_cuda
@pytest.mark.parametrize("mode", mis.LEGAL_MODES)
def test_legal_loads_match_the_reference(mode):
    q = mis.make_blocks(4099, seed=3)  # odd count: the last grid block is partly empty
    got = mis.block_sums(q, mode).cpu().numpy()
    assert np.array_equal(got, mis.reference_block_sums(q.cpu().numpy()))


@requires_cuda
def test_binding_rejects_a_view_at_an_offset():
    q = mis.make_blocks(64)
    view = torch.empty(q.numel() + 2, dtype=torch.uint8, device="cuda")[2:]
    view.copy_(q)
    with pytest.raises(ValueError, match="16-byte boundary"):
        mis.block_sums(view, "two_halves")


@requires_cuda
def test_fixed_kernel_in_a_child_matches_the_reference():
    r = mis.run_in_child(fixed=True)
    assert not r.timed_out and r.returncode == 0, r.stderr
    assert r.report == {**r.report, "mode": "two_halves", "equal": True}


@requires_cuda
def test_naive_kernel_faults_with_misaligned_address_in_a_child():
    r = mis.run_in_child(fixed=False)
    assert not r.timed_out, "the child hung instead of failing"
    assert r.returncode != 0
    assert "misaligned address" in r.stderr, r.stderr[-2000:]
    assert r.report is None  # it never got to print a result
    # ... and this process's GPU still works
    assert torch.ones(4, device="cuda").sum().item() == 4.0


def test_error_line_and_path_scrubbing():
    stderr = (
        "Traceback (most recent call last):\n"
        f'  File "{mis.ROOT}/quantgemm_kernels/appendices/misaligned.py", line 1, in <module>\n'
        "    torch.cuda.synchronize()  # mentions misaligned address in a comment\n"
        '  File "/opt/py/lib/python3.12/site-packages/torch/cuda/__init__.py", line 2, in synchronize\n'
        "torch.AcceleratorError: CUDA error: misaligned address\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    )
    assert mis.error_line(stderr) == "torch.AcceleratorError: CUDA error: misaligned address"
    clean = mis.scrub_paths(stderr)
    assert str(mis.ROOT) not in clean and "/opt/py" not in clean
    assert '"<repo>/quantgemm_kernels/appendices/misaligned.py"' in clean and '"<site-packages>/torch/cuda' in clean
    assert mis.error_line("") == ""


def test_load_recorded_picks_the_newest_by_date(tmp_path):
    assert mis.load_recorded(tmp_path) is None
    for name, date in (("b.json", "2026-01-02T00:00:00"), ("a.json", "2026-03-01T00:00:00")):
        (tmp_path / name).write_text('{"header": {"date": "%s"}, "children": {}, "bandwidth": []}' % date)
    got = mis.load_recorded(tmp_path)
    assert got["header"]["date"].startswith("2026-03") and got["path"] == "a.json"
