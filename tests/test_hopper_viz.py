"""Chapter 6's models of the Hopper steps (quantgemm_kernels/hopper_viz.py): the core-matrix layout
of a stage agrees with the wgmma descriptor's arithmetic and covers every byte once; the mbarrier
model answers parity waits as the PTX ISA says; the warp-specialized ring, run thread by thread as
wgmma_ws.cuh runs it, never lets a consumer read a stage before its producer arrived nor the
producer overwrite a buffer that is still read, for several stage counts, and the checks do catch
the mistakes they are there for."""

import numpy as np
import pytest

from quantgemm_kernels import hopper_viz as hv


# ---- the layout ----


def test_stage_size_is_the_kernels():
    # wgmma.cuh's Stage: quants 8 x 128 x 32, (d_a, c) 8 x 128 float2, weights 8 x 128 x 32, scales 8 x 144 float
    assert hv.STAGE_BYTES == 32768 + 8192 + 32768 + 4608 == 78336
    assert all(size % 16 == 0 for _, size in hv.STAGE_FIELDS)  # no padding between the fields


def test_core_matrices_are_128_contiguous_bytes():
    for g in range(hv.BM // 8):
        for h in range(2):
            row, k = np.meshgrid(np.arange(8 * g, 8 * g + 8), np.arange(16 * h, 16 * h + 16), indexing="ij")
            offs = np.sort(hv.operand_offset(row, k).ravel())
            assert offs[0] == g * hv.SBO + h * hv.LBO
            assert np.array_equal(offs, np.arange(offs[0], offs[0] + hv.CORE))


def test_operand_tile_is_a_permutation():
    row, k = np.meshgrid(np.arange(hv.BM), np.arange(hv.QK), indexing="ij")
    assert np.array_equal(np.sort(hv.operand_offset(row, k).ravel()), np.arange(hv.BM * hv.QK))


def test_every_byte_of_a_stage_is_written_once():
    count, pad = hv.stage_coverage()
    assert count.shape == (hv.STAGE_BYTES,)
    assert np.all(count[~pad] == 1), f"bytes written {sorted(set(count[~pad].tolist()))} times"
    assert np.all(count[pad] == 0)
    assert pad.sum() == hv.KB * 4 * 4 * 4  # 4 pad floats per lane column t and block


def test_descriptor_fields():
    assert hv.smem_desc(0) == (8 << 16) | (16 << 32)  # LBO 128 and SBO 256 bytes, in 16-byte units
    for addr in (0, 16, 1024, hv.STAGE_BYTES, 227 * 1024 - 16):
        assert hv.desc_fields(hv.smem_desc(addr)) == (addr, hv.LBO, hv.SBO)
    with pytest.raises(ValueError):
        hv.smem_desc(8)


@pytest.mark.parametrize("stage_addr", [0, hv.STAGE_BYTES, 1024 + 2 * hv.STAGE_BYTES])
def test_the_tensor_cores_read_what_the_kernel_wrote(stage_addr):
    """desc_address (the descriptor's arithmetic) against operand_offset (the kernel's core_offset)."""
    fo = hv.stage_field_offsets()
    k = np.arange(hv.QK)[None, :]
    for b in (0, 3, hv.KB - 1):
        d = hv.wgmma_operands(stage_addr, b)
        a_base = stage_addr + fo["a"][0] + b * hv.BN * hv.QK
        for wg in (0, 1):
            row = np.arange(64)[:, None]  # the wgmma's M = 64 tokens of consumer warpgroup wg
            got = hv.desc_address(d[f"a{wg}"], row, k)
            assert np.array_equal(got, a_base + hv.operand_offset(64 * wg + row, k))
        row = np.arange(hv.BM)[:, None]  # N = 128 weight rows
        got = hv.desc_address(d["b"], row, k)
        assert np.array_equal(got, stage_addr + fo["w"][0] + b * hv.BM * hv.QK + hv.operand_offset(row, k))


def test_a_wrong_stride_is_caught():
    """With SBO and LBO swapped the descriptor reads other bytes than the kernel wrote."""
    row, k = np.meshgrid(np.arange(16), np.arange(32), indexing="ij")
    swapped = hv.smem_desc(0, lbo=hv.SBO, sbo=hv.LBO)
    assert not np.array_equal(hv.desc_address(swapped, row, k), hv.operand_offset(row, k))


def test_a_quantizer_warp_writes_one_run():
    """wgmma_quantize_act_kernel: lane 4u + p of a warp stores 8 bytes at core_offset(8c + u, p / 2)
    + 8 (p % 2): the warp's 8 tokens of one block are one contiguous 256-byte run."""
    lane = np.arange(32)
    u, p = lane // 4, lane % 4
    for c in range(hv.BN // 8):
        starts = hv.core_offset(8 * c + u, p // 2) + 8 * (p % 2)
        bytes_ = np.sort((starts[:, None] + np.arange(8)).ravel())
        assert np.array_equal(bytes_, np.arange(256 * c, 256 * c + 256))


# ---- ldmatrix ----


def test_ldmatrix_gives_the_mma_fragments():
    """One ldmatrix.x4 at a_addr is the A fragment of mma.m16n8k32 (s8): lane (g, t) holds rows g and
    g + 8 at k = 4t and at k = 16 + 4t, in registers a0 a1 a2 a3."""
    got = hv.ldmatrix_x4_a()
    for ln in range(32):
        g, t = ln // 4, ln % 4
        want = [(g, 4 * t), (g + 8, 4 * t), (g, 16 + 4 * t), (g + 8, 16 + 4 * t)]
        assert [tuple(x) for x in got[ln].tolist()] == want
    words = {tuple(x) for x in got.reshape(-1, 2).tolist()}
    assert len(words) == 16 * 8  # every 4-byte word of the 16 x 32 block, once


# ---- mbarriers ----


def test_fresh_barrier_parities():
    bar = hv.MBarrier("full", 2)
    assert bar.try_wait(1) and not bar.try_wait(0)  # phase 0 open: only its predecessor's parity passes
    bar.arrive(0.0)
    assert not bar.try_wait(0)
    bar.arrive(1.0)  # the second arrival completes phase 0
    assert bar.try_wait(0) and not bar.try_wait(1)
    assert bar.history == [(1.0, 1)]
    bar.arrive(2.0)
    bar.arrive(3.0)
    assert bar.try_wait(1) and not bar.try_wait(0)


def test_expect_tx_holds_the_phase_until_the_bytes_land():
    bar = hv.MBarrier("acts", 1)
    bar.arrive(0.0, expect_tx=40960)
    assert not bar.try_wait(0)
    bar.complete_tx(1.0, 40960)
    assert bar.try_wait(0)
    with pytest.raises(hv.ModelError):
        bar.arrive(2.0, expect_tx=16)
        bar.arrive(2.0, expect_tx=16)  # a second arrival in a phase of count 1


# ---- the warp-specialized ring ----


@pytest.mark.parametrize("stages", [2, 3, 4, 6])
def test_the_kernels_ring_is_safe(stages):
    steps = 4 * stages + 3
    for seed in range(25):
        for s_begin in (0, 5):  # split-K: stages and phases count from the CTA's first step
            t = hv.simulate_ws(steps=steps, stages=stages, producers=4, consumers=4, s_begin=s_begin, seed=seed)
            assert t.error is None, (stages, seed, s_begin, t.error)
            consumed = sorted(s for th, what, s, *_ in t.work if what == "wgmma + scale")
            assert consumed == sorted(list(range(s_begin, s_begin + steps)) * 4)
    t = hv.simulate_ws(steps=steps, stages=stages)  # the fixed times of the chapter's timeline
    assert t.error is None
    for i in range(stages):  # every stage's full and empty barriers completed once per use
        uses = len(range(i, steps, stages))
        assert len(t.barriers[f"full[{i}]"].history) == uses
        assert len(t.barriers[f"empty[{i}]"].history) == uses


def test_one_stage_is_not_enough():
    """The raw weights of step s + 1 are copied while step s is unpacked: that needs two buffers."""
    for seed in (None, 0, 1):
        assert hv.simulate_ws(stages=1, steps=5, seed=seed).error is not None


def test_wrong_parities_are_caught():
    for stages in (2, 3):
        for seed in (None, 0, 1, 2):
            early = hv.simulate_ws(stages=stages, seed=seed, full_parity=lambda r: (r & 1) ^ 1)
            assert early.error is not None  # a read of an empty stage, or a deadlock further on
            if seed is None:  # a fresh full barrier lets a wait for parity 1 pass at once
                assert "consumer 0 reads stage[0].w for step 0, but row 0 holds nothing" in early.error
            late = hv.simulate_ws(stages=stages, seed=seed, empty_parity=lambda r: r & 1)
            assert late.error is not None


def test_the_producers_named_barrier_matters():
    errors = [hv.simulate_ws(seed=s, producer_sync=False).error for s in range(10)]
    assert any(e and "raw[" in e for e in errors), errors


def test_timeline_draws():
    plt = pytest.importorskip("matplotlib.pyplot")
    t = hv.simulate_ws(steps=6, stages=2, producers=1, consumers=2)
    axes = hv.draw_pipeline_timeline(t)
    assert len(axes) == 2
    axes = hv.draw_core_matrix_layout(rows=32)
    assert len(axes) == 2
    hv.draw_ldmatrix_x4()
    plt.close("all")


def test_the_swizzled_descriptor_reads_what_the_tma_wrote():
    """Step 8's activation tile: through swizzle128_desc(start + 32 h) the tensor cores read fp16
    element (row, 16 h + kk) where the TMA's 128-byte swizzle put it, for every row of a 128-row
    tile and every k16 step; without the swizzle, or from a base not 1024-aligned, they would not."""
    rows, kk = np.meshgrid(np.arange(128), np.arange(16), indexing="ij")
    for base in (0, 1024, 7 * 16384):
        for h in range(4):
            desc = hv.swizzle128_desc(base + 32 * h)
            got = hv.desc_address_swizzled(desc, rows, kk)
            assert np.array_equal(got, base + hv.tma_swizzled_offset(rows, 16 * h + kk))
    plain = hv.desc_address_swizzled(hv.swizzle128_desc(32), rows, kk, swizzled=False)
    assert not np.array_equal(plain, hv.tma_swizzled_offset(rows, 16 + kk))
    off = 512  # half an atom: the XOR would take bits of the base
    got = hv.desc_address_swizzled(hv.swizzle128_desc(off), rows, kk)
    assert not np.array_equal(got, off + hv.tma_swizzled_offset(rows, kk))


def test_the_swizzle_permutes_each_row_and_the_descriptor_fields():
    addr = np.arange(hv.SWIZZLE_ATOM)
    assert sorted(hv.swizzle128(addr)) == list(addr)  # a permutation of the atom
    assert np.array_equal(hv.swizzle128(addr) // 128, addr // 128)  # inside each row
    d = hv.swizzle128_desc(2048 + 96)
    assert d >> 62 == 1 and hv.desc_fields(d) == (2048 + 96, 16, 1024)
    with pytest.raises(ValueError, match="16-byte units"):
        hv.swizzle128_desc(8)
    with pytest.raises(ValueError, match="layout type 1"):
        hv.desc_address_swizzled(hv.smem_desc(0), 0, 0)


def test_swizzle_picture_draws():
    import matplotlib

    matplotlib.use("Agg")
    ax = hv.draw_swizzle128(1)
    assert len(ax.texts) == 64
