"""The explorers (quantgemm_kernels.explorers): the data each one embeds in the page equals what
the records and numpy give, and every combination of its controls maps to the right traces."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from quantgemm_kernels import explorers as E
from quantgemm_kernels import formats as F
from quantgemm_kernels import measure
from quantgemm_kernels import reference as R
from quantgemm_kernels.bench.machine import ROOT
from quantgemm_kernels.viz import results_table

KS = (256, 1024)


@pytest.fixture(scope="module")
def grid():
    return E.gemm_nmse_grid(Ks=KS, M=32, N=4)


def embedded(ex: E.Explorer) -> dict:
    """The JSON the page gets, read back from the HTML."""
    m = re.search(r'<script type="application/json" class="qg-explorer-data">(.*?)</script>', ex.to_html(), re.S)
    assert m, "no data script in the explorer's HTML"
    return json.loads(m.group(1).replace("<\\/", "</"))


def close(a, b, rel=1e-3):
    return a is not None and b is not None and abs(a - b) <= rel * abs(b)


def every_key(spec):
    return ["|".join(v) for v in itertools.product(*[[o[0] for o in c["options"]] for c in spec["controls"]])]


# --- the GEMM NMSE explorer ------------------------------------------------------------------


def test_quantized_product_is_the_reference():
    W, A = E.gemm_operands("normal", 16, 3, 256, seed=5)
    Wq = F.quantize(W, "q4_0")
    assert np.array_equal(E.quantized_product(A, W, "q4_0", "q8_1"), R.gemm(A, Wq, "q4_0", "q8_1"))
    assert np.array_equal(E.quantized_product(A, W, "q8_0", "f32"), R.gemm_wq_af32(A, F.quantize(W, "q8_0"), "q8_0"))
    deq = R.gemm_f32(F.dequantize(F.quantize(A, "q8_0"), "q8_0"), F.dequantize(F.quantize(W, "q4_1"), "q4_1"))
    assert np.array_equal(E.quantized_product(A, W, "q4_1", "q8_0"), deq)


def test_grid_is_the_nmse_against_float64(grid):
    assert len(grid) == 3 * 3 * 3 * len(KS)
    W, A = E.gemm_operands("outliers", 32, 4, 1024, seed=0)
    want = R.nmse(E.quantized_product(A, W, "q8_0", "q8_1"), R.gemm_f32(A, W))
    assert grid[("q8_0", "q8_1", "outliers", 1024)] == want
    for dist in E.GEMM_DISTRIBUTIONS:  # 4 bits cost more than 8, on every kind of data
        assert grid[("q4_0", "f32", dist, 1024)] > 10 * grid[("q8_0", "f32", dist, 1024)]


def test_heavy_tails_and_outliers_cost_more(grid):
    for w in ("q4_0", "q8_0"):
        assert grid[(w, "q8_1", "outliers", 1024)] > grid[(w, "q8_1", "normal", 1024)]


def test_gemm_explorer_embeds_the_grid(grid):
    ex = E.gemm_nmse_explorer(grid, M=32, N=4)
    spec = embedded(ex)
    assert [c["name"] for c in spec["controls"]] == ["wfmt", "afmt", "dist"]
    assert sorted(every_key(spec)) == sorted(spec["views"])  # every combination has its view
    for key, view in spec["views"].items():
        wfmt, afmt, dist = key.split("|")
        main = [t for t in view["traces"] if t["name"].startswith(E._fmt_label(wfmt) + " weights")]
        assert len(main) == 1 and main[0]["x"] == list(KS)
        for K, y in zip(KS, main[0]["y"]):
            assert close(y, grid[(wfmt, afmt, dist, K)]), (key, K)
        thr = [t for t in view["traces"] if "threshold" in t["name"]]
        assert thr and thr[0]["y"] == [E.LLAMACPP_MUL_MAT_NMSE] * 2 == [5e-4] * 2
        assert len(view["traces"]) == 9 + 1  # the other 8 pairs in grey, the chosen one, the threshold
    assert ex.view(wfmt="q8_0", afmt="f32", dist="normal") == spec["views"]["q8_0|f32|normal"]


def test_html_loads_the_books_scripts_only(grid):
    page = E.gemm_nmse_explorer(grid, M=32, N=4).to_html()
    assert "_static/explorers/explorer.js" in page and "http" not in page.replace("hovertemplate", "")
    assert "</script>" not in page.split('class="qg-explorer-data">', 1)[1].split("</script>", 1)[0]


def test_mimebundle_outside_a_kernel_is_the_static_figure(grid):
    bundle = E.gemm_nmse_explorer(grid, M=32, N=4)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}


# --- the speedup explorer from the GPU records -----------------------------------------------


@pytest.fixture(scope="module")
def records():
    return E.load_records()


def test_load_records_finds_every_machine_with_a_sweep(records):
    rel = [p.relative_to(ROOT / "bench_results") for p in (ROOT / "bench_results").rglob("sweep-*.json")]
    folders = {r.parts[0] for r in rel if "tmp" not in r.parts}  # (the checkout itself may sit under /tmp)
    assert set(records) == folders and records
    for dev, rec in records.items():
        assert rec["path"] == measure.load_record(ROOT / "bench_results" / dev)["path"]


def test_records_explorer_embeds_the_records(records):
    ex = E.records_explorer(records)
    spec = embedded(ex)
    assert [c["name"] for c in spec["controls"]] == ["device", "wfmt", "shape", "regime", "y"]
    assert spec["views"]
    checked = 0
    for key, view in spec["views"].items():
        dev, wfmt, shape, regime, y = key.split("|")
        M, K = (int(v) for v in shape.split("x"))
        rows = records[dev]["rows"]
        traces = {t["name"]: t for t in view["traces"]}
        best = measure.best_ours(rows, wfmt, M, K, regime)
        llama = measure.side_rows(rows, "llama.cpp", wfmt, M, K, regime)
        ours = traces["ours (fastest kernel)"]
        assert ours["x"] == sorted(best if y == "time" else (set(best) & set(llama)))
        for n, v in zip(ours["x"], ours["y"]):
            want = best[n]["median_us"] if y == "time" else llama[n]["median_us"] / best[n]["median_us"]
            assert close(v, want), (key, n)
            checked += 1
        assert ours["text"] == [best[n]["side"] for n in ours["x"]]  # the kernel behind each point
        if y == "time":
            for side in ("llama.cpp", "cuBLAS fp16", "cuBLASLt int8"):
                by_n = measure.side_rows(rows, side, wfmt, M, K, regime)
                if by_n:
                    assert [close(v, by_n[n]["median_us"]) for n, v in zip(traces[side]["x"], traces[side]["y"])] == [
                        True
                    ] * len(by_n)
            lim = next(t for t in view["traces"] if t["name"].startswith("limit"))
            c = records[dev]["header"]["ceilings"]
            for n, v in zip(lim["x"], lim["y"]):
                nbytes = M * F.row_bytes(wfmt, K) + 4 * n * K + 4 * n * M
                assert close(v, max(nbytes / c["copy_gbps"] / 1e3, 2 * M * n * K / c["cublaslt_int8_tops"] / 1e6))
    assert checked > 100


def test_limit_is_below_every_measured_time(records):
    for dev, rec in records.items():
        c = E.ceilings(rec["header"])
        for r in rec["rows"]:
            if r["status"] == "ok" and r["source"] != "cuBLAS":  # cuBLAS int8 has no weight format of its own
                assert E.limit_us(r["wfmt"], r["M"], r["N"], r["K"], c) < r["median_us"] * 1.02, (
                    dev,
                    r["side"],
                    r["N"],
                )


def test_chapter5_explorer_shows_each_kernel():
    recs = E.load_records(name="ch5")
    spec = embedded(E.records_explorer(recs, ours="each"))
    view = spec["views"]["nvidia-h200|q4_0|4096x14336|cold|time"]
    rows = recs["nvidia-h200"]["rows"]
    names = {t["name"] for t in view["traces"]}
    assert {"cuda_q4_0_q8_1_dp4a", "cuda_q4_0_q8_1_vec_dp4a", "llama.cpp"} <= names
    dp4a = next(t for t in view["traces"] if t["name"] == "cuda_q4_0_q8_1_dp4a")
    side = measure.side_rows(rows, "cuda_q4_0_q8_1_dp4a", "q4_0", 4096, 14336, "cold")
    assert all(close(v, side[n]["median_us"]) for n, v in zip(dp4a["x"], dp4a["y"]))
    assert E.ceilings(recs["nvidia-h200"]["header"])["copy_gbps"] > 0


# --- speedups from bench rows (chapters 1, 3, 4) ---------------------------------------------

ROWS = [
    {"kernel": k, "M": 64, "N": n, "K": 128, "median_ms": t, "gflops": 1.0, "gbps": 1.0}
    for n, ts in ((1, (4.0, 1.0, 0.5)), (8, (8.0, 2.0, 0.1)))
    for k, t in zip(("naive", "blocked", "torch_linear_cpu"), ts)
]


def test_bench_explorer_bars_are_the_speedups():
    spec = embedded(E.bench_explorer(ROWS, baseline="naive", title="t"))
    assert list(spec["views"]) == ["64x1x128", "64x8x128"] == every_key(spec)
    bars = spec["views"]["64x8x128"]["traces"][0]
    assert bars["x"] == ["naive", "blocked", "torch_linear_cpu"] and bars["y"] == [1.0, 4.0, 80.0]
    assert spec["views"]["64x8x128"]["layout"]["yaxis"]["type"] == "log"  # 80x span
    assert spec["views"]["64x1x128"]["layout"]["yaxis"]["type"] == "linear"  # 8x span


def test_rows_from_table_reads_results_table_back():
    back = E.rows_from_table(results_table(ROWS))
    assert [(r["kernel"], r["N"], r["median_ms"]) for r in back] == [
        (r["kernel"], r["N"], r["median_ms"]) for r in ROWS
    ]


def test_unknown_control_value_raises():
    ex = E.bench_explorer(ROWS)
    with pytest.raises(KeyError):
        ex.view(device="x")
    with pytest.raises(ValueError):
        E._control("c", "c", ["a"], "b")


def test_live_explorers_draw_outside_jupyter():
    """The ipywidgets explorers build and draw their first state (matplotlib, no kernel)."""
    import matplotlib

    matplotlib.use("Agg")
    for live in (
        E.records_explorer(E.load_records(name="ch5"), ours="each").live,
        E.records_explorer(E.load_records()).live,
        lambda: E.gemm_nmse_live(M=8, N=2, Ks=(256,)),
        E.bench_explorer(ROWS, baseline="naive").live,
    ):
        assert live().children


def _widgets_in(w) -> list:
    return [w] + [x for c in getattr(w, "children", ()) for x in _widgets_in(c)]


def test_live_explorers_redraw_into_a_png_image():
    """The figure is an Image widget's PNG value (no Output widget): a control moved to another
    value puts another picture there; a combination with no data shows a note and hides it."""
    widgets = pytest.importorskip("ipywidgets")
    import matplotlib

    matplotlib.use("Agg")
    records = E.load_records()
    for box in (
        E.records_explorer(records).live(),
        E.gemm_nmse_live(M=8, N=2, Ks=(256, 1024)),
        E.bench_explorer(ROWS, baseline="naive").live(),
    ):
        ws = _widgets_in(box)
        assert not [w for w in ws if isinstance(w, widgets.Output)]
        (image,) = [w for w in ws if isinstance(w, widgets.Image)]
        assert image.value[:8] == b"\x89PNG\r\n\x1a\n"
        before = image.value
        dropdown = next(w for w in ws if isinstance(w, widgets.Dropdown) and len(w.options) > 1)
        dropdown.value = next(o[1] if isinstance(o, tuple) else o for o in dropdown.options[1:])
        assert image.value[:8] == b"\x89PNG\r\n\x1a\n" and image.value != before
    # it opens on the device asked for, as the page's explorer does
    last = list(records)[-1]
    assert E.records_explorer(records, device=last).live().children[0].children[0].value == last
    # a GPU whose record lacks a shape that another has: the note, no picture; back: the picture
    first = next(iter(records.values()))
    kept = (first["rows"][0]["M"], first["rows"][0]["K"])
    partial = dict(first, rows=[r for r in first["rows"] if (r["M"], r["K"]) == kept])
    box = E.records_explorer({"full": first, "partial": partial}).live()
    device, wfmt, shape = box.children[0].children
    note, image = box.children[1], box.children[2]
    shape.value = next(s[1] for s in shape.options if s[1] != kept)
    device.value = "partial"
    assert "not measured" in note.value and image.layout.display == "none"
    device.value = "full"
    assert note.value == "" and image.layout.display is None
