"""The GPU measurement's pieces that need no GPU: cold-regime rotation, per-call grouping of
profiler records, spread, the busy-host rule, the command line and the record's round trip.
The timings themselves run on a GPU only (and are never asserted)."""

import json
import math

import pytest

from quantgemm_kernels import measure as ms


def test_cold_copies_cover_four_times_the_l2():
    l2 = 60 * 2**20
    for copy_bytes in (33_103_872, 9_437_184, 117_440_512, 2 * l2, 10 * l2):
        c = ms.copies_for(copy_bytes, l2)
        assert c >= 2 and c * copy_bytes >= 4 * l2
        assert (c - 1) * copy_bytes < 4 * l2 or c == 2, "no more copies than needed"
    assert ms.copies_for(33_103_872, 60 * 2**20) == 8  # Q4_0 4096 x 14336 on an H200: 265 MB
    with pytest.raises(ValueError):
        ms.copies_for(0, l2)


def test_calls_are_whole_rotations():
    assert ms.calls_for(8, 32) == 32 and ms.calls_for(26, 32) == 52 and ms.calls_for(1, 32) == 32
    assert ms.calls_for(3, 1) == 3
    with pytest.raises(ValueError):
        ms.calls_for(0, 32)


def test_spread():
    s = ms.spread([4.0, 1.0, 3.0, 2.0, 100.0])
    assert s["min_us"] == 1.0 and s["max_us"] == 100.0 and s["median_us"] == 3.0
    assert s["q1_us"] == 2.0 and s["q3_us"] == 4.0 and s["iqr_us"] == 2.0 and s["samples"] == 5
    with pytest.raises(ValueError):
        ms.spread([])
    with pytest.raises(ValueError):
        ms.spread([1.0, float("nan")])


def _acts(pattern, calls, t0=1000, gap=50):
    """Synthetic CUPTI records: each call launches the kernels of `pattern` (name, duration ns)."""
    acts, t = [], t0
    for _ in range(calls):
        for name, dur in pattern:
            acts.append(ms.Activity(name, t, t + dur))
            t += dur + gap
    return acts


def test_per_call_groups_consecutive_activities():
    acts = _acts([("quantize_q8_1", 1700), ("mul_mat_vec_q", 15000)], calls=4)
    res = ms.per_call(acts[::-1], 4)  # order restored from the start times
    assert res["per_call"] == 2 and res["kernels"] == ["quantize_q8_1", "mul_mat_vec_q"]
    assert res["busy_us"] == [16.7] * 4
    assert math.isclose(res["span_us"], (4 * 16700 + 7 * 50) / 1e3 / 4)


def test_per_call_counts_overlapping_activities_once():
    """A kernel launched with programmatic dependent launch starts while the one before it runs: the
    call's time is the union of their intervals, the plain sum (kept beside it) counts the overlap twice."""
    acts = []
    for c in range(3):
        t = 100_000 * c
        acts += [ms.Activity("quantize", t, t + 2000), ms.Activity("decode", t + 500, t + 14_500)]
    res = ms.per_call(acts, 3)
    assert res["busy_us"] == [14.5] * 3
    assert res["sum_us"] == [16.0] * 3
    nested = [ms.Activity("a", 0, 10_000), ms.Activity("b", 1000, 2000), ms.Activity("c", 12_000, 13_000)]
    assert ms.union_ns(nested) == 11_000
    assert ms.union_ns([]) == 0


def test_per_call_refuses_uneven_records():
    acts = _acts([("a", 10), ("b", 10)], calls=3)[:-1]
    with pytest.raises(ValueError, match="do not split into 3 equal calls"):
        ms.per_call(acts, 3)
    with pytest.raises(ValueError, match="no GPU activity"):
        ms.per_call([], 1)


def test_markers_separate_runs():
    m = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<double>>"
    acts = (
        [ms.Activity(m, 0, 1)]
        + _acts([("x", 5)], 2, t0=10)
        + [ms.Activity(m, 100, 101)]
        + _acts([("y", 7)], 3, t0=200)
        + [ms.Activity(m, 500, 501)]
    )
    segs = ms.split_on_markers(acts, ms._marker_name())
    assert [[a.name for a in s] for s in segs] == [["x", "x"], ["y", "y", "y"]]


def test_busy_host_rule(monkeypatch):
    monkeypatch.setattr(ms.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(ms.os, "getloadavg", lambda: (14.0, 10.0, 5.0))
    assert ms.host_load()["busy"] and ms.host_load()["limit"] == 4.0
    monkeypatch.setattr(ms.os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert not ms.host_load()["busy"]
    monkeypatch.setattr(ms.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(ms.os, "getloadavg", lambda: (2.5, 1.0, 1.0))
    assert not ms.host_load()["busy"], "a 2-core machine running this process and a little more is not busy"


def test_command_line_plan_and_errors(capsys):
    assert ms.main(["--list", "--n", "1,8,512", "--shapes", "down,1024x4096"]) == 0
    out = capsys.readouterr().out
    assert "(4096, 14336)" in out and "(1024, 4096)" in out and "(1, 8, 512)" in out
    assert ms._parse_ns("all") == ms.N_SWEEP and 4096 in ms.N_SWEEP and 16 in ms.N_SWEEP
    for bad in (["--n", "0"], ["--n", "a"], ["--shapes", "4096x100"], ["--shapes", "nope"], ["--formats", "q5_0"]):
        with pytest.raises(SystemExit):
            ms.main(["--list", *bad])


def _row(side, source, N, regime, median, **kw):
    r = {
        "side": side,
        "source": source,
        "wfmt": "q4_0",
        "M": 4096,
        "K": 14336,
        "N": N,
        "regime": regime,
        "status": "ok",
        "median_us": median,
        "iqr_us": 0.1,
        "bytes": 33_103_872 + N * 14336 * 4 + N * 4096 * 4,
        "flops": 2.0 * 4096 * N * 14336,
        "nmse_vs_llamacpp": 1e-12,
    }
    r.update(kw)
    return r


def test_ratios_ceilings_best_and_record_round_trip(tmp_path):
    rows = [
        _row("cuda_q4_0_q8_1_decode", "ours", 1, "cold", 13.0),
        _row("cuda_q4_0_q8_1_mma", "ours", 1, "cold", 40.0),
        _row("llama.cpp", "llama.cpp", 1, "cold", 16.9),
        _row("cuBLAS fp16", "cuBLAS", 1, "cold", 31.0),
        _row("cuda_q4_0_q8_1_decode", "ours", 1, "warm", 9.8),
        _row("llama.cpp", "llama.cpp", 1, "warm", 12.0),
        _row("cuBLAS fp16", "cuBLAS", 1, "warm", 20.0, status="error", reason="x"),
    ]
    ms._derive(rows)
    assert math.isclose(rows[0]["x_llamacpp"], 1.3) and math.isclose(rows[0]["x_cublas_fp16"], 31 / 13)
    assert rows[4]["x_cublas_fp16"] is None, "no ratio against an error row"
    ms.add_ceilings(rows, {"copy_gbps": 4000.0, "cublaslt_int8_tops": 900.0}, {"int8_tops": 1979.0})
    assert math.isclose(rows[0]["pct_copy_bw"], 100 * rows[0]["bytes"] / 13e-6 / 1e9 / 4000)
    assert "pct_copy_bw" not in rows[6]
    best = ms.best_ours(rows, "q4_0", 4096, 14336, "cold")
    assert best[1]["side"] == "cuda_q4_0_q8_1_decode"
    text = ms.table(rows, "q4_0", 4096, 14336)
    assert "decode" in text and "1.30" in text
    path = ms.write_record(rows, {"tool": "test"}, tmp_path / "gpu" / "2026-11-24")
    assert path.name.startswith("sweep-") and json.loads(path.read_text())["columns"]["median_us"]
    back = ms.load_record(tmp_path)
    assert back["rows"] == json.loads(json.dumps(rows)) and back["header"] == {"tool": "test"}
    with pytest.raises(FileNotFoundError):
        ms.load_record(tmp_path / "gpu" / "none")


def test_run_to_run_compares_the_cells_both_runs_measured():
    """measure.run_to_run: per source, newer median / older median over the cells both runs have
    (rows with an error and cells one run lacks left out), as (cells, p5, median, p95)."""
    older = [
        _row("cuda_q4_0_q8_1_decode", "ours", 1, "cold", 10.0),
        _row("cuda_q4_0_q8_1_decode", "ours", 2, "cold", 20.0),
        _row("cuda_q4_0_q8_1_decode", "ours", 4, "cold", 40.0),
        _row("llama.cpp", "llama.cpp", 1, "cold", 16.0),
        _row("llama.cpp", "llama.cpp", 1, "warm", 10.0, status="error", reason="x"),
    ]
    newer = [
        _row("cuda_q4_0_q8_1_decode", "ours", 1, "cold", 11.0),
        _row("cuda_q4_0_q8_1_decode", "ours", 2, "cold", 20.0),
        _row("cuda_q4_0_q8_1_decode", "ours", 4, "cold", 30.0, status="error", reason="x"),
        _row("cuda_q4_0_q8_1_decode", "ours", 8, "cold", 80.0),  # not in the older run
        _row("llama.cpp", "llama.cpp", 1, "cold", 12.0),
        _row("llama.cpp", "llama.cpp", 1, "warm", 10.0),  # the older row is an error
    ]
    got = ms.run_to_run(newer, older)
    assert set(got) == {"ours", "llama.cpp"}, "cuBLAS has no common cell"
    n, p5, med, p95 = got["ours"]
    assert n == 2 and math.isclose(med, 1.05) and 1.0 <= p5 < med < p95 <= 1.1
    assert got["llama.cpp"][0] == 1 and math.isclose(got["llama.cpp"][2], 0.75)


def test_fp16_activation_rows_get_ratios_but_are_not_the_best_of_ours():
    """measure --fp16-a adds the fp16 step on fp16 activations as source "ours (fp16 A)": its ratios
    to llama.cpp and cuBLAS fp16 are derived like any row's, but "best of ours" (the tables, the
    verdicts, the choice report) stays about calls that take float32 activations, even when the
    fp16-A row is faster."""
    rows = [
        _row("cuda_q4_0_f16_wgmma", "ours", 512, "cold", 105.0),
        _row("cuda_q4_0_f16_wgmma (fp16 A)", "ours (fp16 A)", 512, "cold", 94.0),
        _row("llama.cpp", "llama.cpp", 512, "cold", 300.0),
        _row("cuBLAS fp16", "cuBLAS", 512, "cold", 81.0),
    ]
    ms._derive(rows)
    assert math.isclose(rows[1]["x_cublas_fp16"], 81 / 94) and math.isclose(rows[1]["x_llamacpp"], 300 / 94)
    assert ms.best_ours(rows, "q4_0", 4096, 14336)[512]["side"] == "cuda_q4_0_f16_wgmma"
    assert ms.side_rows(rows, "cuda_q4_0_f16_wgmma (fp16 A)", "q4_0", 4096, 14336)[512]["median_us"] == 94.0
    assert ms._parser().parse_args(["--fp16-a"]).fp16_a and not ms._parser().parse_args([]).fp16_a


def test_named_records_and_bench_rows(tmp_path):
    rows = [
        _row("cuda_q4_0_q8_1_dp4a", "ours", 8, "cold", 100.0, min_us=90.0, samples=32),
        _row("llama.cpp", "llama.cpp", 8, "cold", 20.0, min_us=19.0, samples=32),
        _row("llama.cpp", "llama.cpp", 8, "warm", 15.0, min_us=14.0, samples=32),
    ]
    d = tmp_path / "gpu" / "2026-11-24"
    ms.write_record(rows, {"tool": "a"}, d, "ch5")
    ms.write_record(rows[:1], {"tool": "b"}, tmp_path / "tmp", "ch5")  # scratch: never picked
    assert ms.load_record(tmp_path, "ch5")["header"] == {"tool": "a"}
    with pytest.raises(FileNotFoundError):
        ms.load_record(tmp_path)  # no sweep-*.json: a chapter-5 record is not chapter 6's
    with pytest.raises(ValueError):
        ms.write_record(rows, {}, d, "../x")
    b = ms.as_bench_rows(rows)
    assert [r["kernel"] for r in b] == ["cuda_q4_0_q8_1_dp4a", "ggml_cuda_q4_0"]
    assert math.isclose(b[0]["median_ms"], 0.1) and b[0]["timing"] == "cupti-cold" and b[0]["afmt"] == "q8_1"
    assert math.isclose(b[1]["gflops"], 2.0 * 4096 * 8 * 14336 / 20e-6 / 1e9)
