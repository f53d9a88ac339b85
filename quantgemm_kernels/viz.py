"""Figures and ipywidgets explorers shared by the chapters.

Every figure is drawn by a plain function that returns a matplotlib ``Figure``, so a notebook can
show it as an ordinary (static) output: the built book renders saved widget state but cannot run
Python when a slider moves. The explorers only wrap those functions in controls.

Chapter 1 introduces :func:`plot_speedup` and :func:`print_source`; chapter 2 :func:`draw_block_layout`,
:func:`sample_values`, :func:`format_nmse`, :func:`plot_quant_histograms` and :func:`nmse_explorer`;
chapters 3 and 4 use :func:`speedup_explorer` and :func:`plot_roofline`.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from . import formats as F
from . import reference as R

#: One colour per format, the same in every chapter.
FORMAT_COLORS = {
    "f32": "#7f7f7f",
    "f16": "#bcbd22",
    "q4_0": "#1f77b4",
    "q4_1": "#9467bd",
    "q8_0": "#2ca02c",
    "q8_1": "#d62728",
}

#: Distributions :func:`sample_values` draws from (outliers are added on top of any of them).
SAMPLE_DISTRIBUTIONS = ("uniform", "normal", "student_t")


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def figure_image(dpi: int = 80):
    """``(image, show)``: an ``ipywidgets.Image`` and the function that puts a matplotlib figure in
    it as PNG (and closes the figure). The explorers that redraw a figure use it instead of an
    ``Output`` widget around ``plt.show()``: a new picture is only a change of the widget's value,
    so drawing never goes through the kernel's display machinery. (Most of them are built inside
    ``Explorer._repr_mimebundle_``, while IPython formats a cell's result, and a figure shown from
    there through an Output widget re-enters that machinery. On an H100 machine's image a Jupyter
    kernel stalled for minutes in a cell that builds one, in some runs; in others the same cell
    took under a second. The cause was not pinned down; this path leaves it no room.) The PNG is
    cut to the drawn area, as the inline backend does (legends outside the axes included)."""
    import io

    import ipywidgets as widgets

    plt = _pyplot()
    image = widgets.Image(format="png")

    def show(fig) -> None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        image.value = buf.getvalue()

    return image, show


# --------------------------------------------------------------------------------------------
# Chapter 1: kernels, timings, speedups
# --------------------------------------------------------------------------------------------


def print_source(kernel) -> None:
    """Print the source file of a registered kernel, with its path relative to the package (chapter 1).

    ``kernel`` is a :class:`~quantgemm_kernels.registry.Kernel` or its name. The path is printed
    relative to ``quantgemm_kernels/`` so that no machine's directory leaks into a notebook.
    """
    from .excerpts import is_marker, rel
    from .registry import KERNELS

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    print(f"--- {rel(k.source)} ---")  # csrc/<device>/<file>
    # the excerpt markers (comment lines for the notebooks' excerpts, excerpts.py) are left out
    print("\n".join(line for line in k.source.read_text().rstrip().splitlines() if not is_marker(line)))


def results_table(results: list[dict]) -> str:
    """Bench results as an aligned text table: kernel, shape, median ms, GFLOP/s, GB/s (chapter 1)."""
    head = f"{'kernel':28s} {'M':>6s} {'N':>6s} {'K':>6s} {'median ms':>10s} {'GFLOP/s':>9s} {'GB/s':>8s}"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r['kernel']:28s} {r['M']:6d} {r['N']:6d} {r['K']:6d} {r['median_ms']:10.4g} "
            f"{r['gflops']:9.4g} {r['gbps']:8.4g}"
        )
    return "\n".join(lines)


def _shape_key(r: dict) -> tuple[int, int, int]:
    return (int(r["M"]), int(r["N"]), int(r["K"]))


def _shape_label(shape: tuple[int, int, int]) -> str:
    M, N, K = shape
    return f"M={M}\nN={N}\nK={K}"


def _group_by_shape(results: list[dict]) -> "OrderedDict[tuple, OrderedDict[str, dict]]":
    groups: OrderedDict = OrderedDict()
    for r in results:
        groups.setdefault(_shape_key(r), OrderedDict())[r["kernel"]] = r
    return groups


def _kernel_order(results: list[dict]) -> list[str]:
    order: list[str] = []
    for r in results:
        if r["kernel"] not in order:
            order.append(r["kernel"])
    return order


def plot_speedup(results: list[dict], title: str, baseline: str | None = None, ax=None):
    """Bar chart of speedups over a baseline kernel, one group of bars per shape (chapter 1).

    ``results`` is a list of dicts as :func:`quantgemm_kernels.bench.bench_kernel` returns them
    (keys ``kernel``, ``M``, ``N``, ``K``, ``median_ms``; other keys are ignored). The speedup of a
    kernel on a shape is ``median_ms(baseline) / median_ms(kernel)`` on that shape; ``baseline``
    defaults to the first kernel in ``results``. Shapes where the baseline was not measured are
    left out. Each bar is labelled with its speedup; the y axis turns logarithmic when the
    speedups span more than 20x. Put the machine's name in ``title``: a speedup means nothing
    without it.
    """
    plt = _pyplot()
    if not results:
        raise ValueError("results is empty: nothing to plot")
    order = _kernel_order(results)
    baseline = baseline or order[0]
    groups = [(s, g) for s, g in _group_by_shape(results).items() if baseline in g]
    if not groups:
        raise ValueError(f"baseline kernel {baseline!r} was not measured on any shape")
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 + 0.45 * len(groups) * len(order)), 4.2))
    else:
        fig = ax.figure
    width = 0.8 / len(order)
    speedups = []
    for i, name in enumerate(order):
        xs, ys = [], []
        for gi, (_, g) in enumerate(groups):
            if name in g:
                xs.append(gi + (i - (len(order) - 1) / 2) * width)
                ys.append(g[baseline]["median_ms"] / g[name]["median_ms"])
        if not xs:
            continue
        bars = ax.bar(xs, ys, width, label=name)
        for b, y in zip(bars, ys):
            ax.annotate(
                f"{y:.3g}x",
                (b.get_x() + b.get_width() / 2, y),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
        speedups += ys
    ax.axhline(1.0, color="black", lw=0.8)
    if max(speedups) / max(min(speedups), 1e-12) > 20:
        ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([_shape_label(s) for s, _ in groups], fontsize=8)
    ax.set_ylabel(f"speedup over {baseline}")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.margins(y=0.15)
    fig.tight_layout()
    return fig


def speedup_explorer(results: list[dict], baseline: str | None = None, title: str = ""):
    """Pick a shape, see the kernels' speedups on it (chapters 3 and 4; widget over :func:`plot_speedup`).

    Returns an ``ipywidgets.VBox`` holding a shape dropdown and the plot.
    """
    import ipywidgets as widgets

    groups = _group_by_shape(results)
    if not groups:
        raise ValueError("results is empty: nothing to explore")
    options = [(f"M={M}, N={N}, K={K}", (M, N, K)) for (M, N, K) in groups]
    shape = widgets.Dropdown(options=options, description="shape")
    image, show = figure_image(dpi=90)

    def redraw(change=None):
        chosen = [r for r in results if _shape_key(r) == shape.value]
        base = baseline if baseline in {r["kernel"] for r in chosen} else None
        show(plot_speedup(chosen, title or "speedup", baseline=base))

    shape.observe(redraw, names="value")
    redraw()
    return widgets.VBox([shape, image])


def plot_roofline(results: list[dict], peak_gflops: float, peak_gbps: float, title: str, ax=None):
    """Log-log roofline: each measured kernel/shape as a point under the two roofs (chapters 3 and 4).

    x is the arithmetic intensity ``2*M*N*K / bytes`` (FLOP per byte of the fewest bytes the
    kernel must move, ``bytes`` from :func:`quantgemm_kernels.bench.bytes_moved`), y the measured
    GFLOP/s. The roof is ``min(peak_gflops, intensity * peak_gbps)``; the ridge point, where the
    two meet, is marked. A point far below its roof has headroom that is not about bandwidth.
    """
    plt = _pyplot()
    if not results:
        raise ValueError("results is empty: nothing to plot")
    if peak_gflops <= 0 or peak_gbps <= 0:
        raise ValueError(f"peaks must be positive, got {peak_gflops} GFLOP/s and {peak_gbps} GB/s")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 4.5))
    else:
        fig = ax.figure
    ai = np.array([2.0 * r["M"] * r["N"] * r["K"] / r["bytes"] for r in results])
    perf = np.array([r["gflops"] for r in results])
    ridge = peak_gflops / peak_gbps
    lo = min(ai.min(), ridge) / 4
    hi = max(ai.max(), ridge) * 4
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(peak_gflops, xs * peak_gbps), color="black", lw=1.5)
    ax.axvline(ridge, color="gray", lw=0.8, ls=":")
    ax.annotate(
        f"ridge {ridge:.3g} FLOP/B",
        (ridge, peak_gflops),
        xytext=(4, -12),
        textcoords="offset points",
        fontsize=8,
        color="gray",
    )
    ax.annotate(
        f"{peak_gbps:.4g} GB/s", (xs[0], xs[0] * peak_gbps), xytext=(2, 4), textcoords="offset points", fontsize=8
    )
    ax.annotate(
        f"{peak_gflops:.4g} GFLOP/s",
        (xs[-1], peak_gflops),
        xytext=(-4, 4),
        textcoords="offset points",
        fontsize=8,
        ha="right",
    )
    markers = "osD^v<>pPX*h"
    for i, name in enumerate(_kernel_order(results)):
        sel = [j for j, r in enumerate(results) if r["kernel"] == name]
        ax.scatter(ai[sel], perf[sel], marker=markers[i % len(markers)], label=name, zorder=3)
        for j in sel:
            ax.annotate(
                f"N={results[j]['N']}",
                (ai[j], perf[j]),
                xytext=(3, 3),
                textcoords="offset points",
                fontsize=6,
                color="dimgray",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Chapter 2: block layouts and quantization error
# --------------------------------------------------------------------------------------------


def _fields(fmt: str) -> list[tuple[str, int, int]]:
    """(name, first byte, size) of each field of a block, from the numpy dtype (the spec)."""
    dt = F.BLOCK_DTYPES[fmt]
    return [(name, dt.fields[name][1], dt.fields[name][0].itemsize) for name in dt.names]


_FIELD_COLORS = {"d": "#fdd49e", "s": "#d4b9da", "m": "#c7e9c0", "qs": None}  # qs takes the format's colour
_FIELD_TEXT = {"d": "d\nfp16\nscale", "s": "s\nfp16\nsum", "m": "m\nfp16\nmin"}


def draw_block_layout(fmt: str, ax=None, n_blocks: int = 1):
    """Draw ``n_blocks`` consecutive blocks of ``fmt`` byte by byte (chapter 2).

    Each cell is a byte, labelled with its offset below. With one block the cells also say which
    values they hold: for Q4_0, value j in the low nibble and value j+16 in the high nibble of
    byte 2+j; for Q8_0/Q8_1 one value per byte. The strip underneath marks the 32-bit words of
    memory, taking the first block to start 4-byte aligned, so one can see where the first
    quant word starts: Q4_0 and Q8_0 quants start at byte 2 of a block (only 2-byte aligned);
    Q8_1 quants start at byte 4.
    """
    from matplotlib.patches import Rectangle

    plt = _pyplot()
    if fmt not in F.BLOCK_DTYPES:
        raise ValueError(f"fmt must be one of {F.FORMATS}, got {fmt!r}")
    if F.SPECS[fmt].block_size != F.QK:
        raise ValueError(
            f"draw_block_layout draws the 32-value blocks byte by byte; {fmt} is a super-block of "
            f"{F.SPECS[fmt].block_size} values ({F.BLOCK_BYTES[fmt]} bytes)"
        )
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be >= 1, got {n_blocks}")
    bb = F.BLOCK_BYTES[fmt]
    total = bb * n_blocks
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.2 + total * (0.25 if n_blocks == 1 else 0.19), 2.4))
    else:
        fig = ax.figure
    qcolor = FORMAT_COLORS[fmt]
    detail = n_blocks == 1
    nibbles = F.SPECS[fmt].dtype.fields["qs"][0].shape[0] * 2 == F.SPECS[fmt].block_size  # two values a byte
    for b in range(n_blocks):
        base = b * bb
        for name, off, size in _fields(fmt):
            color = _FIELD_COLORS[name] or qcolor
            alpha = 0.35 if name == "qs" else 1.0
            for i in range(size):
                x = base + off + i
                ax.add_patch(Rectangle((x, 0), 1, 1, facecolor=color, alpha=alpha, edgecolor="black", lw=0.6))
                if not detail:
                    continue
                if name == "qs" and nibbles:
                    ax.plot([x, x + 1], [0.5, 0.5], color="black", lw=0.3)
                    ax.text(x + 0.5, 0.75, f"{i + 16}", ha="center", va="center", fontsize=8)
                    ax.text(x + 0.5, 0.25, f"{i}", ha="center", va="center", fontsize=8)
                elif name == "qs":
                    ax.text(x + 0.5, 0.5, f"{i}", ha="center", va="center", fontsize=8)
            if name != "qs":  # the 2-byte headers are labelled inside their cells
                ax.text(
                    base + off + size / 2,
                    0.5,
                    _FIELD_TEXT[name] if detail else name,
                    ha="center",
                    va="center",
                    fontsize=7.5 if detail else 7,
                    bbox=dict(boxstyle="square,pad=0.1", facecolor=_FIELD_COLORS[name], edgecolor="none"),
                )
                continue
            if detail:
                label = (
                    f"qs: {size} bytes = {2 * size} nibbles (low: value j, high: value j+16)"
                    if nibbles
                    else f"qs: {size} x int8 (value j in byte {off}+j)"
                )
            else:
                label = f"block {b}: qs"
            ax.annotate(
                "",
                xy=(base + off, 1.12),
                xytext=(base + off + size, 1.12),
                arrowprops=dict(arrowstyle="|-|", lw=0.7, mutation_scale=3),
            )
            ax.text(base + off + size / 2, 1.22, label, ha="center", va="bottom", fontsize=8.5)
        ax.add_patch(Rectangle((base, 0), bb, 1, fill=False, edgecolor="black", lw=1.8))
    step = 1 if total <= 40 else 2
    for x in range(0, total + 1, step):
        ax.text(
            x + (0.5 if x < total else 0),
            -0.18,
            str(x) if x < total else "",
            ha="center",
            va="top",
            fontsize=7,
            color="dimgray",
        )
    # 32-bit words of memory, assuming block 0 starts on a 4-byte boundary
    for w in range(0, total, 4):
        ax.add_patch(
            Rectangle(
                (w, -0.75), min(4, total - w), 0.3, facecolor="#eeeeee" if (w // 4) % 2 else "#cccccc", edgecolor="none"
            )
        )
    ax.text(-0.3, -0.6, "32-bit words", ha="right", va="center", fontsize=8)
    q_off = dict((n, o) for n, o, _ in _fields(fmt))["qs"]
    for b in range(n_blocks):
        start = b * bb + q_off
        aligned = start % 4 == 0
        if not aligned:  # a 4-byte load of qs[0..3] would straddle two words
            ax.add_patch(Rectangle((start, -0.8), 4, 0.4, fill=False, edgecolor="darkred", lw=1.2, ls="--"))
        if detail:
            text = f"qs at byte {start}" + (
                "" if aligned else f" ({start} mod 4 = {start % 4}): an int32 load there straddles two words"
            )
        else:
            text = f"qs at {start}: " + ("aligned" if aligned else f"{start} mod 4 = {start % 4}")
        ax.annotate(
            text,
            xy=(start, -0.8),
            xytext=(start + 4.6, -1.2),
            fontsize=8.5,
            va="center",
            color="darkgreen" if aligned else "darkred",
            arrowprops=dict(arrowstyle="->", color="darkgreen" if aligned else "darkred", lw=0.8),
        )
    ax.set_xlim(-4.2, total + 0.5)
    ax.set_ylim(-1.4, 1.6)
    ax.set_axis_off()
    what = f"{n_blocks} consecutive blocks" if n_blocks > 1 else "one block"
    ax.set_title(
        f"{fmt.upper()}: {bb} bytes per 32 values ({F.bits_per_weight(fmt):g} bits per value), {what}",
        fontsize=10,
        loc="left",
    )
    fig.tight_layout()
    return fig


def sample_values(
    dist: str = "normal",
    shape=(64, 1024),
    scale: float = 1.0,
    outlier_fraction: float = 0.0,
    outlier_magnitude: float = 30.0,
    df: float = 3.0,
    seed: int = 0,
) -> np.ndarray:
    """float32 values to quantize: a distribution, a scale, and optional outliers (chapter 2).

    ``dist`` is ``"uniform"`` (on [-1, 1]), ``"normal"`` or ``"student_t"`` (``df`` degrees of
    freedom: heavy tails), times ``scale``. Then a fraction ``outlier_fraction`` of the values,
    chosen at random, is multiplied by ``outlier_magnitude``. Seeded: the same arguments give
    the same values on every machine.
    """
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        x = rng.uniform(-1.0, 1.0, shape)
    elif dist == "normal":
        x = rng.standard_normal(shape)
    elif dist == "student_t":
        x = rng.standard_t(df, shape)
    else:
        raise ValueError(f"dist must be one of {SAMPLE_DISTRIBUTIONS}, got {dist!r}")
    if not 0.0 <= outlier_fraction <= 1.0:
        raise ValueError(f"outlier_fraction must be in [0, 1], got {outlier_fraction}")
    mask = rng.random(shape) < outlier_fraction
    x = np.where(mask, x * outlier_magnitude, x) * scale
    return x.astype(np.float32)


def format_nmse(x: np.ndarray, fmts=F.BASIC_FORMATS) -> dict[str, float]:
    """NMSE of quantize-then-dequantize against ``x`` itself, per format (chapter 2).

    Uses the numpy spec (:mod:`quantgemm_kernels.formats`), whose bytes equal llama.cpp's.
    """
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # a scale beyond fp16's range: NMSE is inf
        return {f: R.nmse(F.dequantize(F.quantize(x, f), f), x) for f in fmts}


def plot_quant_histograms(x: np.ndarray, fmts=F.BASIC_FORMATS, bins: int = 121, title: str | None = None):
    """Histograms of the original values and of their dequantized copies, one column per format (chapter 2).

    The grey bars are ``x``; the coloured line is ``dequantize(quantize(x, fmt), fmt)``; the column
    title gives the NMSE. The top row spans every value on a logarithmic count axis, so outliers
    and thin tails stay visible. The bottom row zooms into the central 99% of the values with finer
    bins, where the rounding shows: Q4_0 piles values onto few levels, most visibly onto zero.
    """
    plt = _pyplot()
    x = np.asarray(x, dtype=np.float32)
    errs = format_nmse(x, fmts)
    fig, axes = plt.subplots(2, len(fmts), figsize=(4.0 * len(fmts), 5.6), squeeze=False)
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    zlo, zhi = (float(v) for v in np.percentile(x, [0.5, 99.5]))
    if zlo == zhi:
        zlo, zhi = lo, hi
    full_edges = np.linspace(lo, hi, bins + 1)
    zoom_edges = np.linspace(zlo, zhi, 2 * bins + 1)
    for col, f in enumerate(fmts):
        with np.errstate(over="ignore", invalid="ignore"):
            y = F.dequantize(F.quantize(x, f), f)
        y = y[np.isfinite(y)]  # blocks whose fp16 scale overflowed have no finite values to draw
        color = FORMAT_COLORS.get(f, "C0")
        for row, edges in enumerate((full_edges, zoom_edges)):
            ax = axes[row][col]
            ax.hist(x.ravel(), bins=edges, color="#bbbbbb", label="float32")
            ax.hist(y.ravel(), bins=edges, histtype="step", color=color, lw=1.0, label=f"dequantized {f}")
            ax.set_xlabel("value" if row == 0 else "value (central 99%)")
            if row == 0:
                ax.set_yscale("log")
                ax.set_title(f"{f.upper()}: NMSE {errs[f]:.2e}", fontsize=9)
                ax.legend(fontsize=7)
        axes[0][col].sharey(axes[0][0])
    axes[0][0].set_ylabel("count (log)")
    axes[1][0].set_ylabel("count")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def nmse_explorer(shape=(32, 1024), seed: int = 0):
    """Move the sliders, see what each format does to the values (chapter 2; reused later).

    Controls: distribution, scale, outlier fraction and outlier magnitude (``sample_values``).
    Shows the NMSE of every format as a table and :func:`plot_quant_histograms`. Returns an
    ``ipywidgets.VBox``. In the static book the widget shows its saved state only.
    """
    import ipywidgets as widgets

    plt = _pyplot()
    style = {"description_width": "110px"}
    dist = widgets.Dropdown(options=list(SAMPLE_DISTRIBUTIONS), value="normal", description="distribution", style=style)
    scale = widgets.FloatLogSlider(value=1.0, base=10, min=-4, max=3, step=0.25, description="scale", style=style)
    frac = widgets.FloatSlider(
        value=0.0, min=0.0, max=0.05, step=0.0025, readout_format=".2%", description="outlier fraction", style=style
    )
    mag = widgets.FloatLogSlider(value=30.0, base=10, min=0, max=3, step=0.25, description="outlier x", style=style)
    table = widgets.HTML()
    out = widgets.Output()

    def redraw(change=None):
        x = sample_values(dist.value, shape, scale.value, frac.value, mag.value, seed=seed)
        errs = format_nmse(x)
        rows = "".join(
            f"<tr><td>{f.upper()}</td><td>{F.bits_per_weight(f):g}</td><td>{e:.3e}"
            + ("" if np.isfinite(e) else " (the fp16 scale overflowed: max |x| too large)")
            + "</td></tr>"
            for f, e in errs.items()
        )
        table.value = f"<table><tr><th>format</th><th>bits/value</th><th>NMSE vs float32</th></tr>{rows}</table>"
        with out:
            out.clear_output(wait=True)
            fig = plot_quant_histograms(
                x, title=f"{dist.value}, scale {scale.value:g}, {frac.value:.2%} outliers x{mag.value:g}"
            )
            fig.set_dpi(80)  # the figure is saved in the notebook's widget state: keep it small
            plt.show()

    for w in (dist, scale, frac, mag):
        w.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([widgets.VBox([dist, scale]), widgets.VBox([frac, mag])]), table, out])


# --------------------------------------------------------------------------------------------
# Chapters 5 and 6: the sweep over every batch size (quantgemm_kernels.measure records)
# --------------------------------------------------------------------------------------------


def plot_crossover(record: dict, wfmt: str, M: int, K: int, ax=None):
    """Time per call against N for one weight format and layer shape: our fastest kernel at each N
    (cold, solid; warm, dashed), llama.cpp's mul_mat, cuBLAS fp16 and cuBLASLt int8 (cold), with
    the error bars spanning each row's quartiles, and the floor set by moving the weights at the
    measured copy bandwidth. Both axes are logarithmic."""
    from .measure import best_ours, side_rows

    plt = _pyplot()
    rows, h = record["rows"], record["header"]
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 4.4))
    else:
        fig = ax.figure

    def draw(by_n, label, **style):
        ns = sorted(by_n)
        if not ns:
            return
        med = np.array([by_n[n]["median_us"] for n in ns])
        lo = med - np.array([by_n[n]["q1_us"] for n in ns])
        hi = np.array([by_n[n]["q3_us"] for n in ns]) - med
        ax.errorbar(ns, med, yerr=[lo, hi], label=label, capsize=2, ms=3.5, **style)

    draw(best_ours(rows, wfmt, M, K, "cold"), "ours (fastest chapter-6 kernel), cold", color="C0", marker="o")
    draw(
        best_ours(rows, wfmt, M, K, "warm"),
        "ours, warm (weights in L2 when they fit)",
        color="C0",
        ls="--",
        marker=".",
        alpha=0.6,
    )
    draw(side_rows(rows, "llama.cpp", wfmt, M, K, "cold"), "llama.cpp mul_mat, cold", color="C3", marker="s")
    draw(side_rows(rows, "cuBLAS fp16", wfmt, M, K, "cold"), "cuBLAS fp16, cold", color="C2", marker="^")
    draw(side_rows(rows, "cuBLASLt int8", wfmt, M, K, "cold"), "cuBLASLt int8, cold", color="C7", marker="v")
    bw = h["ceilings"]["copy_gbps"]
    wbytes = M * F.row_bytes(wfmt, K)
    ax.axhline(
        wbytes / bw / 1e3,
        color="black",
        lw=1,
        ls=":",
        label=f"{wfmt.upper()} weights at the copy bandwidth ({bw:.0f} GB/s)",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ns = sorted({r["N"] for r in rows if r["wfmt"] == wfmt and (r["M"], r["K"]) == (M, K)})
    ax.set_xticks(ns, [str(n) for n in ns], fontsize=7)
    ax.set_xlabel("N (tokens in the batch)")
    ax.set_ylabel("µs per call (median; bars: quartiles)")
    g = h.get("ggml") or {}
    ax.set_title(
        f"{wfmt.upper()} weights, M = {M}, K = {K}: kernel time per call (CUPTI)\n"
        f"{h.get('machine')}, llama.cpp = ggml {g.get('ggml_version')}, recorded {str(h.get('date'))[:10]}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="major", lw=0.3)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Which lane reads which address (chapter 3's decode step)
# ---------------------------------------------------------------------------------------------
def decode_lane_addresses(lanes_per_block: int = 4) -> dict[str, np.ndarray]:
    """Byte ranges a warp reads in one step of a Q4_0 x float32 GEMV over 8 blocks of one weight row.

    ``lanes_per_block=4`` is chapter 3's decode step (``03_w4a16/3_decode.cu``): lane ``l = 4b + w``
    takes quant word ``w`` of block ``b`` (bytes ``18 b + 2 + 4w ..``; the 2-byte scale ``d`` first)
    and the two float4 of activations its nibbles multiply (values ``4w ..`` and ``4w + 16 ..`` of
    block ``b``). ``lanes_per_block=1`` is one lane per block, the layout the tiled step's comment
    once suggested: lane ``l`` takes all of block ``l`` (32 blocks per warp step).
    Returns per lane and load instruction ``[start, end)`` byte ranges (a 4-byte word of quants, a
    16-byte float4): ``"w_quants"`` ([32, loads, 2]) into the row's bytes and ``"a"``
    ([32, loads, 2]) into the float32 activation row, and ``"w_scale"`` ([32, 2], the ``d`` each
    lane reads).
    """
    B, QB = F.SPECS["q4_0"].dtype.itemsize, F.QK  # 18 bytes, 32 values per block
    if lanes_per_block == 4:
        lane = np.arange(32)
        b, w = lane // 4, lane % 4
        wq = np.stack([B * b + 2 + 4 * w, B * b + 2 + 4 * w + 4], axis=-1)[:, None, :]
        a0 = (QB * b + 4 * w) * 4
        a1 = (QB * b + 4 * w + 16) * 4
        a = np.stack([np.stack([a0, a0 + 16], -1), np.stack([a1, a1 + 16], -1)], axis=1)
        scale = np.stack([B * b, B * b + 2], axis=-1)
    elif lanes_per_block == 1:  # a lane reads its block's quants a word and its floats a float4 at a time
        lane = np.arange(32)[:, None]
        words, vecs = np.arange(4)[None, :], np.arange(8)[None, :]
        wq = np.stack([B * lane + 2 + 4 * words, B * lane + 2 + 4 * words + 4], axis=-1)
        a = np.stack([QB * 4 * lane + 16 * vecs, QB * 4 * lane + 16 * vecs + 16], axis=-1)
        scale = np.stack([B * lane[:, 0], B * lane[:, 0] + 2], axis=-1)
    else:
        raise ValueError(f"lanes_per_block must be 4 (the decode step) or 1, got {lanes_per_block}")
    return {"w_quants": wq, "a": a, "w_scale": scale}


def draw_decode_lane_map(lanes_per_block: int = 4, axes=None):
    """Draw :func:`decode_lane_addresses`: the weight bytes and the activation bytes of one warp
    step, coloured by the lane that reads them, with the 32-byte sectors (a DRAM/L2 transaction) and
    128-byte lines marked. Lanes that read the same bytes (a block's scale) share a colour band."""
    plt = _pyplot()
    m = decode_lane_addresses(lanes_per_block)
    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(11, 3.6))
    cmap = plt.get_cmap("hsv")
    for ax, key, total, label in (
        (axes[0], "w_quants", int(m["w_quants"].max()), "weight row (Q4_0 bytes)"),
        (axes[1], "a", int(m["a"].max()), "activations (float32 bytes)"),
    ):
        for lane in range(32):
            for k, (s, e) in enumerate(m[key][lane]):  # solid: the warp's first load instruction
                ax.barh(0, e - s, left=s, height=0.8, color=cmap(lane / 32), alpha=1.0 if k == 0 else 0.25, lw=0)
        if key == "w_quants":
            for lane in range(32):
                s, e = m["w_scale"][lane]
                ax.barh(0, e - s, left=s, height=0.8, color="0.55", edgecolor="none")
        for x in range(0, total + 32, 32):
            ax.axvline(x, color="k", lw=0.8 if x % 128 == 0 else 0.3)
        ax.set(
            xlim=(0, total),
            yticks=[],
            xlabel=f"{label}: byte offset (thin lines: 32-byte sectors, thick: 128-byte lines)",
        )
    axes[0].set_title(
        f"one warp step, {'4 lanes per block (chapter 3 decode step)' if lanes_per_block == 4 else 'one lane per block'}:"
        " colour = lane 0..31 (solid: the first load instruction), grey = scales",
        fontsize=9,
    )
    return axes
