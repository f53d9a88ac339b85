"""Smoke tests for quantgemm_kernels.viz: every figure function draws and returns a Figure, every
explorer returns a widget, and the helpers reject what they cannot draw."""

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported anywhere: no display in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from quantgemm_kernels import formats as F  # noqa: E402
from quantgemm_kernels import viz  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def fake_results():
    """Bench-like dicts (as bench.bench_kernel returns) for three kernels on three shapes."""
    out = []
    for n in (1, 8, 64):
        for name, ms in (("slow", 4.0), ("fast", 1.0), ("fastest", 0.1)):
            M = K = 256
            nbytes = 4 * (M * K + n * K + n * M)
            t = ms * n * 1e-3
            out.append(
                {
                    "kernel": name,
                    "device": "cpu",
                    "M": M,
                    "N": n,
                    "K": K,
                    "median_ms": ms * n,
                    "min_ms": ms * n,
                    "reps": 10,
                    "gflops": 2 * M * n * K / t / 1e9,
                    "gbps": nbytes / t / 1e9,
                    "bytes": nbytes,
                }
            )
    return out


def test_plot_speedup_bars_are_speedups_over_the_baseline():
    fig = viz.plot_speedup(fake_results(), "test machine", baseline="slow")
    assert isinstance(fig, Figure)
    heights = sorted({round(p.get_height(), 6) for p in fig.axes[0].patches})
    assert heights == [1.0, 4.0, 40.0]  # slow/slow, slow/fast, slow/fastest
    assert fig.axes[0].get_title() == "test machine"
    assert fig.axes[0].get_yscale() == "log"  # 40x span > 20x


def test_plot_speedup_default_baseline_and_errors():
    fig = viz.plot_speedup(fake_results(), "t")
    assert "speedup over slow" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="empty"):
        viz.plot_speedup([], "t")
    with pytest.raises(ValueError, match="baseline"):
        viz.plot_speedup(fake_results(), "t", baseline="missing")


def test_plot_roofline_points_and_roof():
    res = fake_results()
    fig = viz.plot_roofline(res, peak_gflops=1000.0, peak_gbps=100.0, title="roof")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    n_points = sum(len(c.get_offsets()) for c in ax.collections)
    assert n_points == len(res)
    with pytest.raises(ValueError):
        viz.plot_roofline(res, 0.0, 100.0, "bad peak")


@pytest.mark.parametrize("fmt", [f for f in F.FORMATS if F.SPECS[f].block_size == F.QK])
@pytest.mark.parametrize("n_blocks", [1, 3])
def test_draw_block_layout(fmt, n_blocks):
    fig = viz.draw_block_layout(fmt, n_blocks=n_blocks)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    # one cell per byte plus one outline per block (plus the 32-bit word strip)
    n_bytes = F.BLOCK_BYTES[fmt] * n_blocks
    assert len(ax.patches) >= n_bytes + n_blocks
    q_off = F.BLOCK_DTYPES[fmt].fields["qs"][1]
    marks = [t.get_text() for t in ax.texts if t.get_text().startswith("qs at")]
    assert len(marks) == n_blocks  # where each block's quants start
    assert marks[0].startswith(f"qs at byte {q_off}" if n_blocks == 1 else f"qs at {q_off}:")
    assert ("mod 4" in marks[0]) == (q_off % 4 != 0)  # Q4_0/Q8_0 misaligned, Q8_1 aligned


def test_draw_block_layout_rejects_unknown_format():
    with pytest.raises(ValueError):
        viz.draw_block_layout("q5_0")
    with pytest.raises(ValueError, match="super-block of 256 values"):
        viz.draw_block_layout("q4_k")


def test_sample_values_seeded_and_validated():
    a = viz.sample_values("student_t", (4, 64), outlier_fraction=0.1, seed=3)
    b = viz.sample_values("student_t", (4, 64), outlier_fraction=0.1, seed=3)
    assert a.dtype == np.float32 and a.shape == (4, 64)
    np.testing.assert_array_equal(a, b)
    assert np.abs(viz.sample_values("uniform", (8, 64), scale=2.0)).max() <= 2.0
    with pytest.raises(ValueError):
        viz.sample_values("cauchy")
    with pytest.raises(ValueError):
        viz.sample_values("normal", outlier_fraction=2.0)


def test_format_nmse_orders_the_formats():
    errs = viz.format_nmse(viz.sample_values("normal", (16, 256), seed=1))
    assert set(errs) == set(F.BASIC_FORMATS)
    assert errs["q8_0"] == errs["q8_1"]  # same quants, same d
    assert errs["q8_0"] < errs["q4_0"] / 50


def test_plot_quant_histograms_survives_overflowing_scales():
    fig = viz.plot_quant_histograms(viz.sample_values("normal", (8, 256), seed=2), title="t")
    assert isinstance(fig, Figure) and len(fig.axes) == 2 * len(F.BASIC_FORMATS)
    huge = viz.sample_values("normal", (2, 64), scale=1e7, seed=2)  # Q4_0 d overflows fp16
    assert isinstance(viz.plot_quant_histograms(huge), Figure)


def test_explorers_return_widgets():
    widgets = pytest.importorskip("ipywidgets")
    w = viz.nmse_explorer(shape=(4, 256))
    assert isinstance(w, widgets.Widget)
    s = viz.speedup_explorer(fake_results())
    assert isinstance(s, widgets.Widget)
    dropdown = s.children[0]
    assert len(dropdown.options) == 3  # one entry per shape
    dropdown.value = dropdown.options[-1][1]  # redraws without error


def test_results_table_and_print_source(capsys):
    table = viz.results_table(fake_results())
    assert table.count("\n") == len(fake_results()) + 1
    from quantgemm_kernels import KERNELS

    viz.print_source(next(iter(KERNELS.values())))
    out = capsys.readouterr().out
    assert out.startswith("--- csrc/")
    assert "/work/" not in out and "/root/" not in out  # the path is relative to the package


@pytest.mark.parametrize("lanes_per_block,blocks", [(4, 8), (1, 32)])
def test_decode_lane_map_covers_each_byte_once(lanes_per_block, blocks):
    """Chapter 3's picture of which lane reads which address: the lanes' quant ranges cover the
    step's blocks' 16 quant bytes each exactly once (never a scale byte), their activation ranges
    the blocks' 32 floats exactly once."""
    import numpy as np

    m = viz.decode_lane_addresses(lanes_per_block)
    w = np.zeros(18 * blocks, int)
    for s, e in m["w_quants"].reshape(-1, 2):
        w[s:e] += 1
    quant = np.array([(i % 18) >= 2 for i in range(18 * blocks)])
    assert (w[quant] == 1).all() and (w[~quant] == 0).all()
    a = np.zeros(128 * blocks, int)
    for s, e in m["a"].reshape(-1, 2):
        a[s:e] += 1
    assert (a == 1).all()
    assert set(map(tuple, m["w_scale"])) == {(18 * b, 18 * b + 2) for b in range(blocks)}
    assert len(viz.draw_decode_lane_map(lanes_per_block)) == 2
    with pytest.raises(ValueError, match="lanes_per_block"):
        viz.decode_lane_addresses(2)
