"""quantgemm_kernels.lanes: the lane -> address models of the CUDA kernels of chapters 1, 3 and 4,
their grids and theoretical occupancy, and the shared-memory bank model of the tiled kernels."""

import importlib.util
from collections import Counter

import json
from pathlib import Path

import numpy as np
import pytest

from quantgemm_kernels import lanes
from quantgemm_kernels.registry import KERNELS

M, N, K = 4096, 1, 14336
ALL = list(lanes.MODELS)
BB = {"f32": 4, "q4_0": 18, "q8_0": 34, "q8_1": 36}


def test_models_name_registered_kernels_and_their_files():
    for name, m in lanes.MODELS.items():
        assert name in KERNELS and KERNELS[name].device == "cuda"
        assert KERNELS[name].file == m.file and KERNELS[name].chapter == m.chapter
    chapters = {k.name for k in KERNELS.values() if k.device == "cuda" and k.chapter in (1, 3, 4)}
    assert chapters == set(ALL)  # every CUDA kernel of chapters 1, 3 and 4 has a model


def expected_region(kernel, warp, step):
    """What one step of the main loop must read, from the formats alone: {(operand, row): set of
    byte offsets in the row}. Naive: the warp's 32 rows of W, token row 0 of A; tiled: row `warp`
    (warp 0 for A at N = 1); decode: rows 0 and 1 of W and the step's 8 blocks."""
    m = lanes.MODELS[kernel]
    wb, ab = BB[m.wfmt], BB[m.afmt]
    if m.kind == "naive" and m.wfmt == "f32":
        w_rows, blocks, a_bytes = range(32 * warp, 32 * warp + 32), None, range(4 * step, 4 * step + 4)
        w_bytes = range(4 * step, 4 * step + 4)
    else:
        nblk = {"vec_dp4a": 4, "decode": 8}.get(m.kind, 1)
        first = {"vec_dp4a": 4 * step, "decode": 8 * (warp + 4 * step)}.get(m.kind, step)
        blocks = range(first, first + nblk)
        w_rows = {"decode": range(2)}.get(m.kind, range(32 * warp, 32 * warp + 32))
        if m.kind in ("tiled", "tiled_q8_1", "vec_dp4a"):
            w_rows = [warp]
        per = 4 * 32 if m.wfmt == "f32" else wb  # a float32 "block" is 32 values
        w_bytes = [b * per + i for b in blocks for i in range(per)]
        a_per = 128 if m.afmt == "f32" else ab
        a_bytes = [b * a_per + i for b in blocks for i in range(a_per)]
    region = Counter()
    for r in w_rows:
        region.update(("W", r, x) for x in w_bytes)
    region.update(("A", 0, x) for x in a_bytes)
    return region


@pytest.mark.parametrize("kernel", ALL)
@pytest.mark.parametrize("step", [0, 1, 7])
def test_one_step_reads_each_byte_of_its_tile_once(kernel, step):
    """Over one step of warp 0, the load instructions read every byte of the step's part of W and
    A (values, quants and scales) and nothing else, each byte by exactly one instruction."""
    got = Counter()
    for ld in lanes.warp_loads(kernel, 0, step, M, N, K):
        rows = ld.row[ld.active]
        seen = {(int(r), int(o) + i) for r, o in zip(rows, ld.offset[ld.active]) for i in range(ld.width)}
        got.update((ld.operand, r, x) for r, x in seen)
    assert got == expected_region(kernel, 0, step)


@pytest.mark.parametrize("kernel", [k for k, m in lanes.MODELS.items() if m.warps == 32])
def test_tiled_ctas_warps_stage_the_whole_weight_tile(kernel):
    """The 32 warps of a tiled CTA together read the 32 weight rows of the step once each."""
    got = Counter()
    for w in range(32):
        for ld in lanes.warp_loads(kernel, w, 3, M, N, K):
            if ld.operand == "W":
                got.update(
                    {
                        (int(r), int(o) + i)
                        for r, o in zip(ld.row[ld.active], ld.offset[ld.active])
                        for i in range(ld.width)
                    }
                )
    assert set(got.values()) == {1} and {r for r, _ in got} == set(range(32))


def test_sectors_as_the_code_implies():
    # chapter 1 naive: 32 rows of W, 4 bytes each, K * 4 bytes apart: 32 sectors for 128 bytes (4)
    a, w = lanes.warp_loads("cuda_f32_f32_naive", 0, 5)
    assert (w.sectors(), w.min_sectors(), w.lines()) == (32, 4, 32)
    assert a.broadcast and (a.sectors(), a.min_sectors()) == (1, 1)
    # chapter 1 tiled: warp ty reads 32 consecutive floats of one row: 4 sectors, 1 line
    for ld in lanes.warp_loads("cuda_f32_f32_tiled", 0, 5):
        assert (ld.sectors(), ld.min_sectors(), ld.lines()) == (4, 4, 1)
    # chapter 3 naive: a byte per row: 32 sectors for 32 bytes (1)
    w = [ld for ld in lanes.warp_loads("cuda_q4_0_f32_naive", 0, 0) if ld.what == "quant byte 3"][0]
    assert (w.sectors(), w.min_sectors()) == (32, 1)
    # chapter 3 decode: a float4 instruction reads 64 contiguous bytes per block, 8 blocks: 16 whole
    # sectors in 8 lines
    for ld in lanes.warp_loads("cuda_q4_0_f32_decode", 0, 0):
        if ld.operand == "A":
            assert ld.width == 16 and (ld.sectors(), ld.min_sectors(), ld.lines()) == (16, 16, 8)
    # chapter 4 vec_dp4a: the 32 activation words of 4 blocks are 128 bytes in 144: 5 sectors (4)
    a = lanes.warp_loads("cuda_q4_0_q8_1_vec_dp4a", 0, 0)[0]
    assert a.operand == "A" and (a.sectors(), a.min_sectors()) == (5, 4)


def test_tiled_warps_past_n_issue_no_activation_loads():
    assert {ld.operand for ld in lanes.warp_loads("cuda_f32_f32_tiled", 1, 0, N=1)} == {"W"}
    assert {ld.operand for ld in lanes.warp_loads("cuda_f32_f32_tiled", 1, 0, N=2)} == {"W", "A"}


def test_bad_parameters_raise_clear_errors():
    with pytest.raises(ValueError, match="no lane model"):
        lanes.warp_loads("cuda_q4_0_q8_1_mma")
    with pytest.raises(ValueError, match="warp must be in 0..3"):
        lanes.warp_loads("cuda_f32_f32_naive", warp=4)
    with pytest.raises(ValueError, match="step must be in"):
        lanes.warp_loads("cuda_q4_0_f32_tiled", step=448)
    with pytest.raises(ValueError, match="multiple of 32"):
        lanes.warp_loads("cuda_q4_0_f32_tiled", K=100)
    with pytest.raises(ValueError, match="width"):
        lanes.wavefronts(np.zeros(32, int), 3)
    with pytest.raises(ValueError, match="aligned"):
        lanes.wavefronts(np.arange(32) * 4 + 2, 4)
    with pytest.raises(ValueError, match="shared memory"):
        lanes.occupancy(128, 32, 300 * 1024)
    with pytest.raises(ValueError, match="no padded shared tile"):
        lanes.shared_requests("cuda_f32_f32_naive")


def test_occupancy_limits():
    # the decode step's header: 48 registers let 10 CTAs of 4 warps share an SM (40 of 64 warps)
    o = lanes.occupancy(128, 48, 32)
    assert o["ctas_per_sm"] == 10 and o["limited_by"] == ["registers"] and o["occupancy"] == 40 / 64
    # __launch_bounds__(1024, 2): at 32 registers two 1024-thread CTAs fit
    assert lanes.occupancy(1024, 32, 8448)["ctas_per_sm"] == 2
    assert lanes.occupancy(1024, 33, 0)["ctas_per_sm"] == 1  # 40 registers a thread after rounding
    assert lanes.occupancy(128, 255, 0)["ctas_per_sm"] == 2  # 8192 registers a warp
    o = lanes.occupancy(128, 32, 100 * 1024)  # 101 KB with the reserve: 2 in 228 KB
    assert o["ctas_per_sm"] == 2 and o["limited_by"] == ["shared memory"]
    assert lanes.occupancy(32, 16, 0)["limited_by"] == ["CTA slots"]


def test_launch_grids_at_decode():
    assert lanes.launch("cuda_f32_f32_naive")[0]["grid"] == (32, 1)  # 32 CTAs for 132 SMs
    assert lanes.launch("cuda_q4_0_q8_1_vec_dp4a")[0]["grid"] == (128, 1)
    assert lanes.launch("cuda_q4_0_f32_decode")[0] == {
        "grid": (2048, 1),
        "block": (128, 1),
        "kernel": "q4_0_f32_decode_kernel<2, 1, 1>",
    }
    assert [ln["kernel"][-3:-1] for ln in lanes.launch("cuda_q4_0_f32_decode", N=11)] == [" 8", " 3"]
    assert lanes.launch("cuda_f32_f32_tiled", N=33)[0]["grid"] == (128, 2)


def test_launch_model_follows_the_launchers():
    """The expressions the model copies are the ones in the launchers' source."""
    from quantgemm_kernels.registry import CSRC

    for name, m in lanes.MODELS.items():
        src = (CSRC / "cuda" / m.file).read_text()
        if m.kind in ("naive", "naive_q8_1", "dp4a"):
            assert "const dim3 block(128);" in src and "(p.M + block.x - 1) / block.x, p.N < 65535" in src
        elif m.kind == "decode":
            assert "<<<(M + R - 1) / R, THREADS" in src and "constexpr int R = T == 1 ? 2 : (T <= 4 ? 4 : 8);" in src
            assert "constexpr int U = T == 1 ? 1 : (T <= 3 ? 2 : 1);" in src and "MAX_T = 8" in src
        else:
            assert "const dim3 block(TILE, TILE);" in src and "(p.M + TILE - 1) / TILE, nblocks < 65535" in src


def test_occupancy_table_from_the_record():
    rec = lanes.load_resources()
    assert rec["header"]["arch"] == "sm_90a"
    rows = lanes.occupancy_table(ALL, record=rec)
    by = {r["kernel"]: r for r in rows}
    assert by["cuda_f32_f32_naive"]["ctas"] == 32 and by["cuda_f32_f32_naive"]["sms_busy"] == 32
    d = by["cuda_q4_0_f32_decode"]
    assert d["registers"] == 32 and d["ctas_per_sm"] == 16 and round(d["waves"], 2) == 0.97  # Nsight Compute: 0.97
    assert all(r["spill_bytes"] == 0 for r in rows)
    assert lanes.format_occupancy_table(rows).count("\n") == len(rows)


def test_wavefronts_model():
    lane = np.arange(32)
    assert lanes.wavefronts(4 * lane, 4) == 1  # consecutive words
    assert lanes.wavefronts(np.zeros(32, int), 4) == 1  # one word: broadcast
    assert lanes.wavefronts(8 * lane, 4) == 2  # stride 2 words
    assert lanes.wavefronts(128 * lane, 4) == 32  # one column of a 32-float row pitch
    assert lanes.wavefronts(132 * lane, 4) == 1  # ... of a 33-float pitch
    assert lanes.wavefronts(16 * lane, 16) == 4  # 512 bytes need 4 passes
    assert lanes.wavefronts(lane, 1) == 1  # bytes of 8 words
    assert lanes.wavefronts(np.where(lane < 4, 4 * lane, -1), 4) == 1


def test_chapter1_padding_removes_the_column_conflict():
    for k in range(32):
        pad = {r.array: r for r in lanes.shared_requests("cuda_f32_f32_tiled", True, 5, k)}
        raw = {r.array: r for r in lanes.shared_requests("cuda_f32_f32_tiled", False, 5, k)}
        assert pad["Ws[tx][k]"].wavefronts() == 1 and raw["Ws[tx][k]"].wavefronts() == 32
        assert pad["As[ty][k]"].wavefronts() == raw["As[ty][k]"].wavefronts() == 1  # a broadcast either way
        # without the padding ptxas merges four k into one 16-byte load: 8 per step, not 32
        assert (pad["Ws[tx][k]"].width, pad["Ws[tx][k]"].count) == (4, 32)
        assert (raw["Ws[tx][k]"].width, raw["Ws[tx][k]"].count) == (16, 8)
    text = lanes.format_bank_table("cuda_f32_f32_tiled")
    assert text.splitlines()[-1].split()[-2:] == ["66", "266"]
    assert lanes.bank_totals("cuda_f32_f32_tiled") == {"padded": 66.0, "unpadded": 266.0}


def test_chapter1_bank_model_agrees_with_the_measurement():
    """Nsight Compute's shared-memory wavefronts per warp and K step (tools/bank_conflicts, both
    builds of chapter 1's kernel) within 5 % of the model; a model of 4-byte loads in the unpadded
    build (1058) would be four times off."""
    records = sorted(Path(__file__).resolve().parent.parent.glob("bench_results/*/*/bank-conflicts-*.json"))
    assert records, "no bank-conflicts record under bench_results/"
    rec = json.loads(records[-1].read_text())
    model = lanes.bank_totals("cuda_f32_f32_tiled")
    for key, build in (("padded", "pad1"), ("unpadded", "pad0")):
        measured = rec["builds"][build]["wavefronts_per_warp_and_k_step"]["total"]
        assert abs(measured - model[key]) <= 0.05 * model[key], (key, measured, model[key])
    assert rec["builds"]["pad0"]["time"]["median_ms"] > rec["builds"]["pad1"]["time"]["median_ms"]


@pytest.mark.parametrize("kernel", list(lanes.PADDED))
def test_padding_never_hurts_and_helps_the_weight_reads(kernel):
    rows = lanes.bank_table(kernel)

    def cost(r, key):
        return r[key]["per_step"] * r[key]["wavefronts"]

    # per K step in all; one request may cost more padded (chapter 1's As reads: the padding stops
    # ptxas from merging four 4-byte loads into one 16-byte load, 32 broadcasts instead of 8)
    assert sum(cost(r, "padded") for r in rows) < sum(cost(r, "unpadded") for r in rows)
    assert any(
        r["request"].startswith(("Ws[tx]", "w_qs[tx]")) and cost(r, "unpadded") > cost(r, "padded") for r in rows
    )


def test_padding_in_the_sources():
    from quantgemm_kernels.registry import CSRC

    src = {m.file: (CSRC / "cuda" / m.file).read_text() for k, m in lanes.MODELS.items() if k in lanes.PADDED}
    assert "Ws[TILE][TILE + 1]" in src["01_fp32/2_tiled.cu"] and "Ws[TILE][TILE + 1]" in src["03_w4a16/2_tiled.cu"]
    assert "w_qs[TILE][WF::qs_bytes + 4]" in src["04_w4a8/2_tiled.cu"]
    assert "w_qs[TILE][WF::qs_words + 1]" in src["04_w4a8/4_tiled_dp4a.cu"]
    assert "W_PITCH = BK * W_VECS + 1" in src["04_w4a8/5_vec_dp4a.cu"]


def test_tables_and_drawings():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    text = lanes.format_sector_table(lanes.sector_table(["cuda_f32_f32_naive", "cuda_f32_f32_tiled"]))
    assert text.count("\n") == 4 and "32.00" in text
    for kernel in ALL:
        assert len(lanes.draw_lane_map(kernel)) == 2
        plt.close("all")
    assert len(lanes.draw_lane_map("cuda_f32_f32_tiled", warp=3)) == 2  # no A loads: a note instead
    plt.close("all")


def test_resource_tool_parses_ptxas():
    spec = importlib.util.spec_from_file_location("resource_usage", lanes.ROOT / "tools" / "resource_usage.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    text = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z16f32_naive_kernelPKfS0_Pfiii' for 'sm_90a'
ptxas info    : Function properties for _Z16f32_naive_kernelPKfS0_Pfiii
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 31 registers, used 1 barriers, 8448 bytes smem
ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'
ptxas info    : Function properties for _Z1kv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 4 registers
"""
    a, b = tool.parse_ptxas(text)
    assert a == {
        "symbol": "_Z16f32_naive_kernelPKfS0_Pfiii",
        "arch": "sm_90a",
        "stack_bytes": 8,
        "spill_store_bytes": 4,
        "spill_load_bytes": 4,
        "registers": 31,
        "barriers": 1,
        "smem_bytes": 8448,
    }
    assert (b["registers"], b["smem_bytes"], b["barriers"]) == (4, 0, 0)


@pytest.mark.parametrize("wfmt", ["q4_0", "q8_0"])
def test_tiled_dp4a_stages_with_the_tiled_steps_loads(wfmt):
    """Chapter 4 says so: 4_tiled_dp4a.cu copies its tiles from global memory as 2_tiled.cu does."""
    for warp, step in ((0, 0), (5, 9)):
        a = lanes.warp_loads(f"cuda_{wfmt}_q8_1_tiled", warp, step)
        b = lanes.warp_loads(f"cuda_{wfmt}_q8_1_tiled_dp4a", warp, step)
        assert [(x.operand, x.width, x.row.tolist(), x.offset.tolist()) for x in a] == [
            (x.operand, x.width, x.row.tolist(), x.offset.tolist()) for x in b
        ]
