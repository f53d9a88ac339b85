"""The benchmark command and its files: a row per (kernel, shape), the header that says what
produced the numbers, round trips through CSV and JSON, the timed operator giving gemm()'s output,
entries told apart by their side. Speed itself is never asserted."""

import json
import math
import os

import pytest
import torch

from quantgemm_kernels import KERNELS, api, bench, llamacpp
from quantgemm_kernels.testing import k_step, quantize_weights

TINY = [(64, 1, 64), (33, 3, 96)]  # ragged M, N, K: every kernel, one repeat, well under a second
TINY_SPEC = ",".join(f"{m}x{n}x{k}" for m, n, k in TINY)
HEADER_FIELDS = ("machine", "date", "git_commit", "torch", "threads", "activation_quant_timed")


def _run_main(tmp_path, *extra):
    rc = bench.main(
        [
            "--shapes",
            TINY_SPEC,
            "--reps",
            "1",
            "--warmup",
            "0",
            "--out",
            str(tmp_path),
            "--no-ceilings",
            "--quiet",
            *extra,
        ]
    )
    assert rc == 0
    (csv_path,), (json_path,) = tmp_path.glob("*.csv"), tmp_path.glob("*.json")
    return bench.load_results(csv_path), bench.load_results(json_path)


def test_main_writes_a_row_per_kernel_and_shape(tmp_path, capsys):
    from_csv, from_json = _run_main(tmp_path)
    expected = {(name, *shape) for name in KERNELS for shape in TINY}
    for res in (from_csv, from_json):
        got = [(r["kernel"], r["M"], r["N"], r["K"]) for r in res["rows"]]
        assert sorted(got) == sorted(expected)  # each exactly once
        for field in HEADER_FIELDS:
            assert field in res["header"], field
        assert res["header"]["activation_quant_timed"] is True
    assert from_csv["header"]["git_commit"] == from_json["header"]["git_commit"]
    has_gpu = torch.cuda.is_available()
    for r in from_json["rows"]:
        if r["K"] % k_step(r["kernel"]):  # K = 64 or 96 for the K-quants' 256-value super-blocks
            assert r["status"] == "skipped" and "256-value blocks" in r["reason"], r
        elif has_gpu and r["device"] == "cuda" and not KERNELS[r["kernel"]].runs_on(torch.cuda.get_device_capability()):
            assert r["status"] == "skipped" and "compute capability" in r["reason"]
        elif r["device"] == "cpu" or has_gpu:
            assert r["status"] == "ok", r
            assert r["median_ms"] > 0 and r["reps"] >= 1
            assert r["act_quant_timed"] == (r["afmt"] != "f32")
        else:
            assert r["status"] == "skipped" and "GPU" in r["reason"]
    # the CSV holds the same rows as the JSON (numbers to CSV precision)
    for a, b in zip(from_csv["rows"], from_json["rows"]):
        assert a["kernel"] == b["kernel"] and a["status"] == b["status"]
        if b["median_ms"] is not None:
            assert math.isclose(a["median_ms"], b["median_ms"], rel_tol=1e-9)
    out = capsys.readouterr().out
    assert "INSIDE the timed region" in out and "kernel" in out


def test_exclude_act_quant_is_recorded(tmp_path):
    _, res = _run_main(tmp_path, "--kernels", "cpu_*", "--exclude-act-quant")
    assert res["header"]["activation_quant_timed"] is False
    assert not any(r["act_quant_timed"] for r in res["rows"] if r["source"] == "ours")


def test_kernel_globs_add_the_naive_baseline():
    picked = bench.select_kernels("cpu", "*_blocked")
    names = [k.name for k in picked]
    assert all(k.device == "cpu" for k in picked)
    for k in picked:
        if k.name.endswith("_blocked") and bench.baseline_name(k) in KERNELS:
            assert bench.baseline_name(k) in names
    assert bench.select_kernels("cpu", "*_blocked", baseline=False) == [
        k for k in picked if k.name.endswith("_blocked")
    ]
    with pytest.raises(ValueError, match="no kernel matches"):
        bench.select_kernels("cpu", "no_such_kernel_*")


def test_speedups_are_relative_to_the_naive_kernel(tmp_path):
    rows = bench.run_sweep(["cpu_f32_f32_blocked"], [(64, 2, 64)], reps=1, warmup=0, progress=False)
    by_name = {r["kernel"]: r for r in rows}
    assert set(by_name) == {"cpu_f32_f32_naive", "cpu_f32_f32_blocked"}
    r, b = by_name["cpu_f32_f32_blocked"], by_name["cpu_f32_f32_naive"]
    assert r["baseline"] == "cpu_f32_f32_naive" and r["speedup_basis"] == "measured"
    assert math.isclose(r["speedup_vs_naive"], b["median_ms"] / r["median_ms"])


def test_too_slow_combinations_are_skipped_with_a_reason(monkeypatch):
    monkeypatch.setattr(bench.sweep, "_PROBE_FLOPS", 0)  # probe even a tiny shape
    rows = bench.run_sweep(
        ["cpu_f32_f32_naive"], [(256, 1, 64)], reps=1, warmup=0, max_seconds=1e-12, progress=False, baseline=False
    )
    (r,) = rows
    assert r["status"] == "skipped" and "--max-seconds" in r["reason"] and r["est_ms"] > 0
    assert r["median_ms"] is None


def test_parse_shapes():
    assert bench.parse_shapes("llama") == [(4096, n, 14336) for n in (1, 2, 3, 4, 5, 8, 512)]
    assert bench.parse_shapes("tutorial,4096x512x4096,8x1x32") == [(4096, 512, 4096), (8, 1, 32)]
    assert bench.parse_shapes([(1, 1, 32), "small"])[:2] == [(1, 1, 32), (1024, 1, 1024)]
    for bad in ("huge", "4x4", "4x4x33", "0x1x32"):
        with pytest.raises(ValueError):
            bench.parse_shapes(bad)


def test_load_results_from_a_folder(tmp_path):
    rows = bench.run_sweep(["cpu_f32_f32_naive"], [(8, 1, 32)], reps=1, warmup=0, progress=False)
    header = bench.make_header("cpu", note="test")
    _, json_path = bench.write_results(rows, header, tmp_path / "m" / "d")
    res = bench.load_results(tmp_path)
    assert res["path"] == str(json_path) and res["header"]["note"] == "test"
    assert json.loads(json_path.read_text())["columns"]["tflops"]


def test_measure_ceilings_reports_both_roofs():
    c = bench.measure_ceilings("cpu", copy_mb=4, matmul_n=64, reps=2)
    assert c["device"] == "cpu" and set(c["matmul_tflops"]) == {"fp32"}
    for v in (c["copy_gbps"], c["matmul_tflops"]["fp32"]):
        assert math.isfinite(v) and v > 0


@pytest.mark.skipif(not llamacpp.available()["cpu_backend"], reason="ggml (ggml-python or ggml-py) not installed")
def test_ggml_rows(tmp_path):
    _, res = _run_main(tmp_path, "--kernels", "*q4_0*", "--ggml", "--device", "cpu")
    by_name = {(r["kernel"], r["M"]): r for r in res["rows"]}
    for M, _, _ in TINY:
        r = by_name[("ggml_cpu_q4_0", M)]
        assert r["status"] == "ok" and r["source"] == "llama.cpp" and r["afmt"] == "q8_0" and r["median_ms"] > 0
        assert r["baseline"] == "cpu_q4_0_q8_1_naive" or "cpu_q4_0_q8_1_naive" not in KERNELS
    assert res["header"]["ggml"]["importable"] is True


@pytest.mark.parametrize("flags, batched", [((), False), (("--batched",), True), (("--graph",), True)])
def test_graph_implies_batched(tmp_path, flags, batched):
    """--graph times graph replays of R calls: without the batch it would time one graph launch per
    call, so it turns batching on, as --batched does (and --ggml)."""
    _, res = _run_main(tmp_path, "--kernels", "cpu_f32_f32_naive", *flags)
    for r in res["rows"]:
        assert r["status"] == "ok", r
        want = llamacpp.perf_repeats(r["M"], r["N"], r["K"], "cpu") if batched else 1
        assert r.get("batch", 1) == want, (flags, r)


def test_cpu_name_names_the_cpu_never_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "FAKE GPU 9000")
    name = bench.cpu_name()
    assert bench._cpu_model() in name and f"{torch.get_num_threads()} thread" in name
    assert "FAKE GPU" not in name and torch.__version__ in name
    assert ", 1 thread " in bench.cpu_name(1) and ", 3 threads " in bench.cpu_name(3)
    assert bench.machine_name("cpu") == name


CPUINFO_HT = "\n\n".join(  # 2 sockets x 2 cores x 2 hyperthreads
    f"processor\t: {p}\nmodel name\t: X\nphysical id\t: {p // 4}\ncore id\t\t: {p % 2}\n" for p in range(8)
)


def test_physical_cores_counts_hyperthread_siblings_once():
    assert bench._cores_in_cpuinfo(CPUINFO_HT) == 4
    assert bench._cores_in_cpuinfo(CPUINFO_HT, allowed={0, 2}) == 1  # siblings on one core
    assert bench._cores_in_cpuinfo(CPUINFO_HT, allowed={0, 1, 4}) == 3
    assert bench._cores_in_cpuinfo("processor\t: 0\nmodel name\t: X\n") == 0  # no core ids: fall back
    n = bench.physical_cores()
    assert isinstance(n, int) and 1 <= n <= (os.cpu_count() or 1)


def test_host_load_busy_rule(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    for load, threads, busy in [(0.1, 8, False), (15.9, 8, False), (16.1, 8, True), (8.9, 1, False), (9.1, 1, True)]:
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        h = bench.host_load(threads)
        assert h == {"load_1min": load, "cpus": 16, "threads": threads, "busy": busy}, h
    monkeypatch.delattr(os, "getloadavg")
    assert bench.host_load(2) == {"load_1min": None, "cpus": 16, "threads": 2, "busy": False}
    assert bench.host_load()["threads"] == torch.get_num_threads()


def test_cache_option_is_checked_and_recorded():
    with pytest.raises(ValueError, match="cache must be"):
        bench.run_sweep(["cpu_f32_f32_naive"], "16x1x32", reps=1, warmup=0, progress=False, cache="hot")
    rows = bench.run_sweep(
        ["cpu_f32_f32_naive"], "16x1x32", reps=1, warmup=0, progress=False, baseline=False, cache="cold"
    )
    # 2 KB of weights: the most copies a CPU row takes (512, 1 MB) stay inside any last-level cache
    r = rows[0]
    assert r["copies"] == bench.sweep.MAX_CPU_COPIES and r["cache"] == "warm" and "stay inside" in r["reason"]
    json.dumps(rows)  # every field a plain value (a GPU run once stored the sweep's tensor cache here)
    assert "cache" in bench.COLUMNS and "copies" in bench.COLUMNS


def test_cold_cache_on_the_cpu_rotates_past_the_last_level_cache(monkeypatch):
    """With a (pretended) 256 KiB last-level cache, 64 KB of Q4_0 weights need 16 copies: ours and,
    where ggml loads, llama.cpp's mul_mat each read the copies in turn, and the rows say so."""
    from quantgemm_kernels.bench import machine

    assert machine.cpu_last_level_cache_bytes() > 0
    monkeypatch.setattr(machine, "cpu_last_level_cache_bytes", lambda default=0: 256 << 10)
    rows = bench.run_sweep(
        ["cpu_q4_0_q8_1_simd", "ggml_cpu_q4_0"],
        "256x1x4096",
        reps=2,
        warmup=0,
        progress=False,
        baseline=False,
        cache="cold",
    )
    wbytes = 256 * 4096 // 32 * 18
    for r in rows:
        if r["status"] != "ok":
            assert r["kernel"].startswith("ggml"), r
            continue
        assert r["cache"] == "cold" and r["copies"] * wbytes >= 4 * (256 << 10), r
    warm = bench.run_sweep(["cpu_q4_0_q8_1_simd"], "256x1x4096", reps=2, warmup=0, progress=False, baseline=False)
    assert warm[0]["cache"] == "warm" and warm[0]["copies"] == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cold_cache_rotates_over_copies_larger_than_the_l2():
    name = "cuda_q4_0_q8_1_dp4a"
    rows = bench.run_sweep([name], "1024x1x4096", reps=2, warmup=0, progress=False, baseline=False, cache="cold")
    r = rows[0]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert r["status"] == "ok" and r["cache"] == "cold"
    assert r["copies"] * 1024 * 4096 // 32 * 18 >= 4 * l2
    graph = bench.run_sweep(
        ["cuda_q4_0_q8_1_decode"],
        "1024x1x4096",
        reps=2,
        warmup=0,
        progress=False,
        baseline=False,
        cache="cold",
        graph=True,
    )[0]
    if graph["status"] == "ok":  # a graph replays whole rotations over the copies
        assert graph["timing"] == "cuda-graph" and graph["batch"] % graph["copies"] == 0


def test_cold_warm_table_pairs_rows():
    base = {"M": 64, "N": 1, "K": 64, "status": "ok"}
    cold = [dict(base, kernel="a", median_ms=2.0), dict(base, kernel="b", median_ms=1.0, status="skipped")]
    warm = [dict(base, kernel="a", median_ms=1.0)]
    text = bench.cold_warm_table(cold, warm)
    assert "2.00" in text and text.count("\n") == 2


def test_row_round_trip(tmp_path):
    row = bench.Row(
        kernel="cpu_q4_0_q8_1_simd",
        source="ours",
        device="cpu",
        wfmt="q4_0",
        afmt="q8_1",
        chapter=4,
        M=64,
        N=3,
        K=96,
        median_ms=0.1 + 0.2,
        min_ms=1 / 3,
        reps=7,
        batch=2,
        timing="perf_counter",
        tflops=1e-5,
        gflops=1e-2,
        gbps=0.123456789,
        bytes=12345,
        act_quant_timed=True,
        baseline="cpu_q4_0_q8_1_naive",
        speedup_vs_naive=2.5,
        speedup_basis="measured",
    )
    assert list(row.to_dict()) == list(bench.COLUMNS), "a row's fields are the columns, in order"
    assert row.cache == "n/a" and bench.Row.from_dict(row.to_dict()) == row
    skipped = bench.Row(
        kernel="cuda_f32_f32_naive",
        source="ours",
        device="cuda",
        wfmt="f32",
        afmt="f32",
        chapter=1,
        M=64,
        N=3,
        K=96,
        status="skipped",
        reason="no CUDA GPU here",
    )
    assert skipped.cache == "warm"
    csv_path, json_path = bench.write_results([row.to_dict(), skipped.to_dict()], {"tool": "test"}, tmp_path)
    for path in (csv_path, json_path):  # exact through both: floats are written as repr
        back = [bench.Row.from_dict(r) for r in bench.load_results(path)["rows"]]
        assert back == [row, skipped], path.suffix
    old = {k: v for k, v in skipped.to_dict().items() if k not in ("batch", "timing", "cache", "copies")}
    old["an_older_extra_key"] = 1  # records before the cache column; keys that are not columns
    assert bench.Row.from_dict(old) == skipped


def test_cache_is_a_column_of_every_row_and_record(tmp_path):
    _, res = _run_main(tmp_path, "--kernels", "cpu_f32_f32_naive", "--cache", "cold")
    assert res["rows"] and all(r["cache"] in ("cold", "warm") and r["copies"] > 1 for r in res["rows"])
    assert res["header"]["args"]["cache"] == "cold"
    header = next(line for line in next(tmp_path.glob("*.csv")).read_text().splitlines() if not line.startswith("#"))
    assert "cache" in header.split(",") and "copies" in header.split(",")


def _runnable(k):
    if k.device == "cpu":
        return True
    return torch.cuda.is_available() and api.cuda_kernels_built() and k.runs_on(torch.cuda.get_device_capability())


@pytest.mark.parametrize("name", list(KERNELS))
def test_timed_operator_gives_gemms_output(name):
    """The sweep times the compiled operator on inputs checked once; its output is gemm()'s, bit for bit."""
    k = KERNELS[name]
    if not _runnable(k):
        pytest.skip(f"{k.device} kernel not runnable here")
    g = torch.Generator().manual_seed(3)
    K = 3 * k_step(k)  # three blocks (three super-blocks of 256 for the K-quants)
    A = torch.randn(5, K, generator=g).to(k.device)
    W = torch.randn(33, K, generator=g).to(k.device)
    Wk = W if k.wfmt == "f32" else quantize_weights(W, k.wfmt)
    assert torch.equal(bench.operator_call(k, A, Wk)(), api.gemm(A, Wk, k))
    if k.afmt != "f32" and not k.fused_quant:
        Aq = api.quantize(A, k.afmt, q8_1_sum=k.q8_1_sum)
        assert torch.equal(
            bench.operator_call(k, A, Wk, include_activation_quant=False)(), api.gemm_quantized(Aq, Wk, k)
        )


def test_timed_operator_inputs_are_checked_once_by_the_api():
    k = KERNELS["cpu_q4_0_q8_1_naive"]
    A, W = torch.randn(2, 64), torch.randn(4, 64)
    with pytest.raises(TypeError, match="W must be torch.uint8"):  # float32 weights for a Q4_0 kernel
        bench.operator_call(k, A, W)
    with pytest.raises(ValueError, match="not a whole number of q4_0 blocks"):
        bench.operator_call(k, A, api.quantize(W, "q8_0")[:, :-2].contiguous())
    with pytest.raises(TypeError, match="A must be torch.float32"):
        bench.operator_call(k, A.double(), api.quantize(W, "q4_0"))


def test_entries_carry_their_side():
    ours = bench.select_kernels("cpu", "cpu_q4_0_*", baseline=False)
    assert ours and all(isinstance(e, bench.Entry) and e.side == "ours" for e in ours)
    ggml = bench.ggml_entries("cpu")
    assert ggml and all(e.side == "llama.cpp" and e.name.startswith("ggml_cpu_") for e in ggml)
    assert bench.entry("cpu_q4_0_q8_1_naive").side == "ours" and bench.entry(ggml[0]) is ggml[0]
    with pytest.raises(ValueError, match="side must be one of"):
        bench.Entry("x", "cpu", "q4_0", "q8_1", 4, "", side="mine")
    # the side, not the name, decides: the same fields under llama.cpp's side get the Q8_1 baseline
    fields = dict(name="ggml_cpu_q4_0", device="cpu", wfmt="q4_0", afmt="q8_0", chapter=5, title="")
    assert bench.baseline_name(bench.Entry(**fields, side="llama.cpp")) == "cpu_q4_0_q8_1_naive"
    assert bench.baseline_name(bench.Entry(**fields, side="ours")) == "cpu_q4_0_q8_0_naive"
    with_ggml = bench.select_kernels("cpu", "*q4_0*", ggml=True)
    assert [e.side for e in with_ggml] == sorted((e.side for e in with_ggml), key=lambda s: s != "ours")
    rows = bench.run_sweep(["cpu_f32_f32_naive"], "16x1x32", reps=1, warmup=0, progress=False, baseline=False)
    assert rows[0]["source"] == "ours" and rows[0]["timing"] == "perf_counter"
