"""Explorers that respond in the built book: precomputed views, drawn by plotly.js in the page.

An :class:`Explorer` holds controls (dropdowns) and one precomputed view (plotly traces and
layout) per combination of their values. Shown in a notebook, its output carries two things:

* ``text/html``: the data as JSON and a loader for ``_static/explorers/explorer.js``, which draws
  the views with plotly.js (``_static/plotly/``, the basic bundle), both served by the book itself
  (``widgets_static/site``). Moving a control switches views in the browser; no Python kernel is
  needed, so the figure works in the static book, offline too. The book renders this part.
* the live explorer, where one exists: an ipywidgets explorer that computes on the reader's machine
  (:func:`quantgemm_kernels.viz.speedup_explorer`, :func:`quantgemm_kernels.viz.plot_crossover` under
  dropdowns, :func:`gemm_nmse_live`). Jupyter renders this part when the cell runs.

The explorers of the chapters:

* :func:`gemm_nmse_explorer` (chapter 2): NMSE of a quantized GEMM against the float64 truth, per
  weight format, activation format, distribution and K, with llama.cpp's MUL_MAT threshold.
* :func:`records_explorer` (chapters 5 and 6): time per call against N from the GPU records of
  :mod:`quantgemm_kernels.measure`, per device, weight format, layer shape and cache regime: ours,
  llama.cpp, cuBLAS and the limit set by the record's measured ceilings.
* :func:`bench_explorer` (chapters 1, 3 and 4): speedups over a baseline kernel per shape, from
  :mod:`quantgemm_kernels.bench` rows (chapter 1: the FP32 ladder against torch).
"""

from __future__ import annotations

import html
import itertools
import json
import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import formats as F
from . import reference as R

#: llama.cpp's test-backend-ops passes MUL_MAT below this NMSE (``test_mul_mat::max_nmse_err``).
LLAMACPP_MUL_MAT_NMSE = 5e-4

#: The distributions of the GEMM NMSE explorer: keyword arguments of ``viz.sample_values``, the same
#: kinds of data as chapter 2's NMSE table (normal; Student-t with 3 degrees of freedom; normal with
#: 1% of the values multiplied by 30).
GEMM_DISTRIBUTIONS = {
    "normal": dict(dist="normal"),
    "heavy-tailed": dict(dist="student_t", df=3.0),
    "outliers": dict(dist="normal", outlier_fraction=0.01, outlier_magnitude=30.0),
}
GEMM_WEIGHT_FORMATS = ("q4_0", "q4_1", "q8_0")
GEMM_ACT_FORMATS = ("f32", "q8_0", "q8_1")
GEMM_KS = (256, 1024, 4096, 14336)

_PLOTLY_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"],
}
_SIDE_COLORS = {
    "ours": "#1f77b4",
    "llama.cpp": "#d62728",
    "cuBLAS fp16": "#2ca02c",
    "cuBLASLt int8": "#7f7f7f",
    "limit": "#000000",
}
_LOADER = (
    "(function(){if(window.QGExplorers){window.QGExplorers.mountAll();return;}"
    'var r=document.documentElement.getAttribute("data-content_root");'
    'if(r===null||document.querySelector("script[data-qg-explorers]"))return;'
    'var s=document.createElement("script");s.src=r+"_static/explorers/explorer.js";'
    's.setAttribute("data-qg-explorers","");document.head.appendChild(s);})();'
)


def _r(x: float | None, digits: int = 4) -> float | None:
    """A number rounded to ``digits`` significant digits for the page (None and non-finite: None)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


@dataclass
class Explorer:
    """Controls and one precomputed view per combination of their values.

    ``controls``: ``[{"name", "label", "options": [[value, label], ...], "value"}]``, in order.
    ``views``: ``{key: {"traces": [plotly trace dicts], "layout": {...}, "note": str}}`` with
    ``key`` the controls' values joined by ``|`` (:meth:`key`); a combination without a view shows
    ``missing``. ``layout`` is shared by every view; a view's layout is laid over it.
    ``live``: a function returning the ipywidgets explorer for Jupyter, or None.
    """

    title: str
    controls: list[dict]
    views: dict[str, dict]
    layout: dict = field(default_factory=dict)
    missing: str = "not measured"
    height: int = 460
    live: Callable | None = None
    fallback: str = ""

    def key(self, *values) -> str:
        if len(values) != len(self.controls):
            raise ValueError(
                f"{len(self.controls)} controls ({[c['name'] for c in self.controls]}), got {len(values)} values"
            )
        return "|".join(str(v) for v in values)

    def view(self, **values) -> dict | None:
        """The view for the given control values (by control name; defaults: the initial values)."""
        unknown = set(values) - {c["name"] for c in self.controls}
        if unknown:
            raise KeyError(f"no control named {sorted(unknown)}")
        return self.views.get(self.key(*(values.get(c["name"], c["value"]) for c in self.controls)))

    def spec(self) -> dict:
        return {
            "title": self.title,
            "controls": self.controls,
            "views": self.views,
            "layout": self.layout,
            "missing": self.missing,
            "config": _PLOTLY_CONFIG,
        }

    def to_html(self) -> str:
        """The figure for the page: its data as JSON, and the loader of the book's explorer script."""
        data = json.dumps(self.spec(), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
        fallback = html.escape(
            self.fallback
            or f"{self.title}: this interactive figure is drawn by the "
            "book's scripts (in the built book); in Jupyter, run the cell."
        )
        return (
            f'<div class="qg-explorer" id="qg-explorer-{uuid.uuid4().hex[:12]}">'
            '<div class="qg-controls" style="display:flex;flex-wrap:wrap;gap:0.3em 1.2em;'
            'font-size:0.9em;margin-bottom:0.3em"></div>'
            f'<div class="qg-plot" style="width:100%;height:{int(self.height)}px"></div>'
            '<div class="qg-note" style="font-size:0.8em;color:#555"></div>'
            f'<p class="qg-fallback"><em>{fallback}</em></p>'
            f'<script type="application/json" class="qg-explorer-data">{data}</script>'
            f"</div><script>{_LOADER}</script>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        n = len(self.views)
        bundle = {
            "text/plain": f"Explorer({self.title!r}: {n} views over {', '.join(c['name'] for c in self.controls)})",
            "text/html": self.to_html(),
        }
        if self.live is not None and _in_kernel():  # Jupyter shows the live explorer; the book, the HTML
            self._widget = self.live()
            view = self._widget._repr_mimebundle_()
            if isinstance(view, tuple):
                view = view[0]
            mime = "application/vnd.jupyter.widget-view+json"
            if view and mime in view:
                bundle[mime] = view[mime]
        return bundle


def _control(name: str, label: str, options, value=None) -> dict:
    opts = [[str(o[0]), str(o[1])] if isinstance(o, (tuple, list)) else [str(o), str(o)] for o in options]
    if not opts:
        raise ValueError(f"control {name!r} has no options")
    value = opts[0][0] if value is None else str(value)
    if value not in [o[0] for o in opts]:
        raise ValueError(f"control {name!r}: {value!r} is not one of {[o[0] for o in opts]}")
    return {"name": name, "label": label, "options": opts, "value": value}


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------------------------
# Chapter 2: the error of a quantized GEMM
# --------------------------------------------------------------------------------------------


def gemm_operands(dist: str, M: int, N: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Weights ``W [M, K]`` and activations ``A [N, K]``, float32, both drawn from ``dist`` (a key
    of :data:`GEMM_DISTRIBUTIONS`), seeded."""
    from .viz import sample_values

    if dist not in GEMM_DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {tuple(GEMM_DISTRIBUTIONS)}, got {dist!r}")
    kw = GEMM_DISTRIBUTIONS[dist]
    return (sample_values(shape=(M, K), seed=seed, **kw), sample_values(shape=(N, K), seed=seed + 1, **kw))


def quantized_product(A: np.ndarray, W: np.ndarray, wfmt: str, afmt: str) -> np.ndarray:
    """``C [N, M]`` of the quantized operands, in float64: what a kernel of these formats computes.

    ``afmt="f32"``: the activations as they are times the dequantized weights
    (:func:`reference.gemm_wq_af32`). Q8_1 activations with Q4_0 or Q8_0 weights: the integer block
    formula of the kernels (:func:`reference.gemm`, Q8_1 with ``s = d * sum(q)``). Any other pair:
    the product of the two dequantized matrices.
    """
    Wq = F.quantize(W, wfmt)
    if afmt == "f32":
        return R.gemm(A, Wq, wfmt, "f32")
    if afmt == "q8_1" and wfmt in ("q4_0", "q8_0"):
        return R.gemm(A, Wq, wfmt, "q8_1")
    return R.gemm_f32(F.dequantize(F.quantize(A, afmt), afmt), F.dequantize(Wq, wfmt))


def gemm_nmse_grid(
    wfmts=GEMM_WEIGHT_FORMATS,
    afmts=GEMM_ACT_FORMATS,
    dists=tuple(GEMM_DISTRIBUTIONS),
    Ks=GEMM_KS,
    M: int = 128,
    N: int = 16,
    seed: int = 0,
) -> dict[tuple, float]:
    """NMSE of :func:`quantized_product` against the float64 product of the unquantized operands,
    ``{(wfmt, afmt, dist, K): nmse}``. Seconds on two cores at the defaults."""
    out = {}
    for dist, K in itertools.product(dists, Ks):
        W, A = gemm_operands(dist, M, N, K, seed)
        truth = R.gemm_f32(A, W)
        for wfmt, afmt in itertools.product(wfmts, afmts):
            out[(wfmt, afmt, dist, K)] = R.nmse(quantized_product(A, W, wfmt, afmt), truth)
    return out


def _fmt_label(f: str) -> str:
    return "float32" if f == "f32" else f.upper()


def gemm_nmse_explorer(grid: dict | None = None, M: int = 128, N: int = 16, seed: int = 0) -> Explorer:
    """Chapter 2's GEMM explorer: pick weight format, activation format and distribution; see the
    NMSE of the product against the float64 truth at every K (bold), the other format pairs of the
    same distribution (grey), and llama.cpp's MUL_MAT threshold. ``grid`` from
    :func:`gemm_nmse_grid` (computed here when None, with ``M``, ``N``, ``seed``)."""
    grid = gemm_nmse_grid(M=M, N=N, seed=seed) if grid is None else grid
    wfmts = list(dict.fromkeys(k[0] for k in grid))
    afmts = list(dict.fromkeys(k[1] for k in grid))
    dists = list(dict.fromkeys(k[2] for k in grid))
    Ks = sorted({k[3] for k in grid})
    controls = [
        _control("wfmt", "weights", [(f, _fmt_label(f)) for f in wfmts]),
        _control("afmt", "activations", [(f, _fmt_label(f)) for f in afmts], "q8_1" if "q8_1" in afmts else None),
        _control("dist", "data", dists),
    ]
    views = {}
    for wfmt, afmt, dist in itertools.product(wfmts, afmts, dists):
        traces = []
        for w2, a2 in itertools.product(wfmts, afmts):
            if (w2, a2) == (wfmt, afmt):
                continue
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": Ks,
                    "y": [_r(grid.get((w2, a2, dist, K))) for K in Ks],
                    "name": f"{_fmt_label(w2)} x {_fmt_label(a2)}",
                    "showlegend": False,
                    "line": {"color": "#c8c8c8", "width": 1},
                    "hoverinfo": "name+y",
                }
            )
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": Ks,
                "y": [_r(grid.get((wfmt, afmt, dist, K))) for K in Ks],
                "name": f"{_fmt_label(wfmt)} weights x {_fmt_label(afmt)} activations",
                "line": {"color": "#1f77b4", "width": 3},
                "marker": {"size": 8},
            }
        )
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [Ks[0], Ks[-1]],
                "y": [LLAMACPP_MUL_MAT_NMSE] * 2,
                "name": "llama.cpp MUL_MAT threshold (5e-4)",
                "line": {"color": "#d62728", "dash": "dash", "width": 1.5},
            }
        )
        views[f"{wfmt}|{afmt}|{dist}"] = {
            "traces": traces,
            "layout": {
                "title": {
                    "text": f"{_fmt_label(wfmt)} weights x {_fmt_label(afmt)} activations, {dist} data: "
                    f"NMSE of C [N={N}, M={M}] against the float64 truth"
                }
            },
        }
    layout = {
        "xaxis": {
            "type": "log",
            "title": {"text": "K (length of each dot product)"},
            "tickvals": Ks,
            "ticktext": [str(K) for K in Ks],
        },
        "yaxis": {"type": "log", "title": {"text": "NMSE vs float64 A @ W^T"}, "exponentformat": "power"},
        "legend": {"orientation": "h", "y": -0.22},
        "margin": {"t": 50, "r": 20},
        "title": {"font": {"size": 13}},
    }
    return Explorer(
        "GEMM error by format, data and K",
        controls,
        views,
        layout,
        height=440,
        live=lambda: gemm_nmse_live(M=M, N=N, seed=seed, Ks=tuple(Ks)),
    )


def gemm_nmse_live(M: int = 128, N: int = 16, seed: int = 0, Ks=GEMM_KS):
    """The GEMM NMSE explorer computing on this machine (ipywidgets): dropdowns for the formats and
    the data, a seed; the curve over ``Ks`` with the threshold, redrawn on every change."""
    import ipywidgets as widgets

    from .viz import figure_image

    plt = _pyplot()
    style = {"description_width": "90px"}
    wfmt = widgets.Dropdown(options=list(GEMM_WEIGHT_FORMATS), value="q4_0", description="weights", style=style)
    afmt = widgets.Dropdown(options=list(GEMM_ACT_FORMATS), value="q8_1", description="activations", style=style)
    dist = widgets.Dropdown(options=list(GEMM_DISTRIBUTIONS), value="normal", description="data", style=style)
    seed_w = widgets.IntSlider(value=seed, min=0, max=20, description="seed", style=style)
    image, show = figure_image(dpi=90)

    def redraw(change=None):
        grid = gemm_nmse_grid((wfmt.value,), (afmt.value,), (dist.value,), Ks, M, N, seed_w.value)
        ys = [grid[(wfmt.value, afmt.value, dist.value, K)] for K in Ks]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ax.loglog(Ks, ys, "o-", lw=2, label=f"{wfmt.value} x {afmt.value}, {dist.value}")
        ax.axhline(LLAMACPP_MUL_MAT_NMSE, color="C3", ls="--", label="llama.cpp MUL_MAT threshold (5e-4)")
        ax.set_xticks(Ks, [str(K) for K in Ks])
        ax.set_xlabel("K")
        ax.set_ylabel("NMSE vs float64")
        ax.set_title(f"N = {N}, M = {M}, seed {seed_w.value}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        show(fig)

    for w in (wfmt, afmt, dist, seed_w):
        w.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([wfmt, afmt]), widgets.HBox([dist, seed_w]), image])


# --------------------------------------------------------------------------------------------
# Chapters 5 and 6: the GPU records of quantgemm_kernels.measure
# --------------------------------------------------------------------------------------------


def load_records(root=None, name: str = "sweep") -> dict[str, dict]:
    """The newest ``<name>-*.json`` record of every machine folder under ``root`` (default the
    repository's ``bench_results``) that has one, by folder name (``measure.load_record``; ``tmp``
    folders are scratch space and skipped)."""
    from . import measure
    from .bench.machine import ROOT

    root = Path(root) if root is not None else ROOT / "bench_results"
    out = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "tmp"):
        try:
            out[d.name] = measure.load_record(d, name)
        except FileNotFoundError:
            continue
    if not out:
        raise FileNotFoundError(f"no {name}-*.json record under {root}")
    return out


def limit_us(wfmt: str, M: int, N: int, K: int, ceilings: dict) -> float:
    """The least time a call can take on the record's machine, in µs: the fewest bytes (weights,
    float32 A and C) at the measured copy bandwidth, or 2MNK at the measured cuBLASLt int8 rate,
    whichever is longer."""
    nbytes = M * F.row_bytes(wfmt, K) + 4 * N * K + 4 * N * M
    return max(nbytes / (ceilings["copy_gbps"] * 1e9), 2.0 * M * N * K / (ceilings["cublaslt_int8_tops"] * 1e12)) * 1e6


def ceilings(header: dict) -> dict:
    """The measured ceilings of a record's header (a sweep's ``ceilings``, or a chapter-5 record's
    ``ceilings["cuda"]``)."""
    c = header.get("ceilings") or {}
    return c if "copy_gbps" in c else c.get("cuda", {})


def _gpu_name(header: dict) -> str | None:
    gpu = header.get("gpu")
    return gpu.get("name") if isinstance(gpu, dict) else gpu


def record_series(
    record: dict, wfmt: str, M: int, K: int, regime: str, ours: str = "best"
) -> dict[str, dict[int, dict]]:
    """The rows an explorer view draws: ``{label: {N: row}}`` for ours (``"best"``: the fastest of our
    kernels at each N, ``measure.best_ours``; ``"each"``: every kernel of ours on its own),
    llama.cpp, cuBLAS fp16 and cuBLASLt int8 (``measure.side_rows``), where recorded."""
    from . import measure

    rows = record["rows"]
    out: dict[str, dict[int, dict]] = {}
    if ours == "best":
        out["ours (fastest kernel)"] = measure.best_ours(rows, wfmt, M, K, regime)
    elif ours == "each":
        for side in dict.fromkeys(r["side"] for r in rows if r["source"] == "ours" and r["wfmt"] == wfmt):
            out[side] = measure.side_rows(rows, side, wfmt, M, K, regime)
    else:
        raise ValueError(f"ours must be 'best' or 'each', got {ours!r}")
    for side in ("llama.cpp", "cuBLAS fp16", "cuBLASLt int8"):
        out[side] = measure.side_rows(rows, side, wfmt, M, K, regime)
    return {k: v for k, v in out.items() if v}


def _color(label: str, i: int) -> str:
    for key, c in _SIDE_COLORS.items():
        if label.startswith(key):
            return c
    return ["#1f77b4", "#17becf", "#9467bd", "#8c564b", "#e377c2"][i % 5]


def records_explorer(
    records: dict[str, dict],
    ours: str = "best",
    title: str = "Kernel time per call against N",
    device: str | None = None,
) -> Explorer:
    """Pick device, weight format, layer shape, cache regime and what to plot (time per call, or
    speedup over llama.cpp); see ours, llama.cpp and cuBLAS against N, with the limit of
    :func:`limit_us` from the record's measured ceilings. ``records``: ``{device folder: record}``
    (:func:`load_records`). Chapter 6 shows our fastest kernel (``ours="best"``), chapter 5 each
    of its kernels (``ours="each"``). It opens on ``device`` (default: the first) and on the
    4096 x 14336 layer where recorded (ffn down, llama.cpp's MUL_MAT test shape)."""
    devices = list(records)
    wfmts = sorted({r["wfmt"] for rec in records.values() for r in rec["rows"]})
    shapes = sorted({(r["M"], r["K"]) for rec in records.values() for r in rec["rows"]})
    regimes = [g for g in ("cold", "warm") if any(r["regime"] == g for rec in records.values() for r in rec["rows"])]
    ys = [("time", "µs per call"), ("speedup", "speedup over llama.cpp")]
    controls = [
        _control("device", "GPU", [(d, _gpu_name(records[d]["header"]) or d) for d in devices], device),
        _control("wfmt", "weights", [(f, f.upper()) for f in wfmts]),
        _control(
            "shape",
            "layer (M x K)",
            [(f"{M}x{K}", f"{M} x {K}") for M, K in shapes],
            "4096x14336" if (4096, 14336) in shapes else None,
        ),
        _control(
            "regime",
            "weights in cache",
            [(g, {"cold": "cold (as in a model)", "warm": "warm (one copy)"}[g]) for g in regimes],
        ),
        _control("y", "plot", ys),
    ]
    views = {}
    for dev, wfmt, (M, K), regime, (y, _) in itertools.product(devices, wfmts, shapes, regimes, ys):
        rec = records[dev]
        series = record_series(rec, wfmt, M, K, regime, ours)
        llama = series.get("llama.cpp", {})
        if not series or (y == "speedup" and not llama):
            continue
        h = rec["header"]
        traces = []
        for i, (label, by_n) in enumerate(series.items()):
            ns = sorted(by_n)
            if y == "speedup":
                ns = [n for n in ns if n in llama]
                if label == "llama.cpp" or not ns:
                    continue
                vals = [llama[n]["median_us"] / by_n[n]["median_us"] for n in ns]
                err = None
            else:
                vals = [by_n[n]["median_us"] for n in ns]
                err = {
                    "type": "data",
                    "symmetric": False,
                    "thickness": 1,
                    "width": 3,
                    "array": [_r(by_n[n]["q3_us"] - by_n[n]["median_us"], 3) for n in ns],
                    "arrayminus": [_r(by_n[n]["median_us"] - by_n[n]["q1_us"], 3) for n in ns],
                }
            t = {
                "type": "scatter",
                "mode": "lines+markers",
                "x": ns,
                "y": [_r(v) for v in vals],
                "name": label,
                "line": {"color": _color(label, i)},
                "text": [by_n[n]["side"] for n in ns],
                "hovertemplate": "N=%{x}: %{y}<br>%{text}<extra></extra>",
            }
            if err:
                t["error_y"] = err
            traces.append(t)
        ns_all = sorted({n for by_n in series.values() for n in by_n})
        ceil = ceilings(h)
        lim = {n: limit_us(wfmt, M, n, K, ceil) for n in ns_all}
        if y == "speedup":
            ns_l = [n for n in ns_all if n in llama]
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": ns_l,
                    "y": [_r(llama[n]["median_us"] / lim[n]) for n in ns_l],
                    "name": "limit (llama.cpp's time / least possible time)",
                    "line": {"color": "#000000", "dash": "dot"},
                }
            )
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": [ns_all[0], ns_all[-1]],
                    "y": [1, 1],
                    "name": "as fast as llama.cpp",
                    "showlegend": False,
                    "line": {"color": "#d62728", "width": 1},
                    "hoverinfo": "skip",
                }
            )
        else:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": ns_all,
                    "y": [_r(lim[n]) for n in ns_all],
                    "name": f"limit: copy {ceil['copy_gbps']:.0f} GB/s, int8 "
                    f"{ceil['cublaslt_int8_tops']:.0f} TOPS (measured)",
                    "line": {"color": "#000000", "dash": "dot"},
                }
            )
        g = h.get("ggml") or {}
        views["|".join((dev, wfmt, f"{M}x{K}", regime, y))] = {
            "traces": traces,
            "layout": {
                "title": {
                    "text": f"{wfmt.upper()} weights, M = {M}, K = {K}, weights {regime}: "
                    f"{h.get('machine')}<br><sub>llama.cpp = ggml {g.get('ggml_version')}, "
                    f"recorded {str(h.get('date'))[:10]}; kernel time from CUPTI, median "
                    "(bars: quartiles)</sub>"
                },
                "yaxis": {"title": {"text": dict(ys)[y]}},
            },
        }
    n_ticks = sorted({r["N"] for rec in records.values() for r in rec["rows"]})
    layout = {
        "xaxis": {
            "type": "log",
            "title": {"text": "N (tokens in the batch)"},
            "tickvals": n_ticks,
            "ticktext": [str(n) for n in n_ticks],
        },
        "yaxis": {"type": "log"},
        "legend": {"orientation": "h", "y": -0.2},
        "margin": {"t": 70, "r": 20},
        "title": {"font": {"size": 13}},
    }

    def live():
        return records_live(records, device=device)

    return Explorer(title, controls, views, layout, height=520, live=live)


def records_live(records: dict[str, dict], device: str | None = None):
    """:func:`quantgemm_kernels.viz.plot_crossover` under dropdowns (device, weight format, shape),
    redrawn with matplotlib in Jupyter; it opens on ``device`` where given and recorded."""
    import ipywidgets as widgets

    from .viz import figure_image, plot_crossover

    device = widgets.Dropdown(
        options=list(records), value=device if device in records else next(iter(records)), description="GPU"
    )
    wfmt = widgets.Dropdown(
        options=sorted({r["wfmt"] for rec in records.values() for r in rec["rows"]}), description="weights"
    )
    shape = widgets.Dropdown(
        options=[
            (f"{M} x {K}", (M, K))
            for M, K in sorted({(r["M"], r["K"]) for rec in records.values() for r in rec["rows"]})
        ],
        description="M x K",
    )
    image, show = figure_image(dpi=90)
    note = widgets.HTML()

    def redraw(change=None):
        rec = records[device.value]
        rec = dict(rec, header=dict(rec["header"], ceilings=ceilings(rec["header"])))  # chapter 5's: under "cuda"
        measured = any(r["wfmt"] == wfmt.value and (r["M"], r["K"]) == shape.value for r in rec["rows"])
        note.value = "" if measured else "<em>not measured on this GPU</em>"
        image.layout.display = None if measured else "none"
        if measured:
            show(plot_crossover(rec, wfmt.value, *shape.value))

    for w in (device, wfmt, shape):
        w.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([device, wfmt, shape]), note, image])


# --------------------------------------------------------------------------------------------
# Chapters 1, 3 and 4: speedups over a baseline kernel, from bench rows
# --------------------------------------------------------------------------------------------


def bench_speedups(results: list[dict], baseline: str | None = None) -> dict[tuple, dict[str, float]]:
    """``{(M, N, K): {kernel: speedup}}``: per shape, ``median_ms(baseline) / median_ms(kernel)``,
    as :func:`quantgemm_kernels.viz.plot_speedup` computes them. The baseline is ``baseline`` where
    it was measured on the shape, otherwise the shape's first kernel."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in results:
        if r.get("status", "ok") == "ok" and r.get("median_ms"):
            groups.setdefault((int(r["M"]), int(r["N"]), int(r["K"])), {})[r["kernel"]] = r
    out = {}
    for shape, g in groups.items():
        base = baseline if baseline in g else next(iter(g))
        out[shape] = {k: g[base]["median_ms"] / r["median_ms"] for k, r in g.items()}
    return out


def bench_explorer(results: list[dict], baseline: str | None = None, title: str = "") -> Explorer:
    """Pick a shape, see every kernel measured on it as a speedup over ``baseline`` (bars, labelled;
    logarithmic where they span more than 20x). The live explorer is
    :func:`quantgemm_kernels.viz.speedup_explorer` on the same rows."""
    from .viz import speedup_explorer

    sp = bench_speedups(results, baseline)
    if not sp:
        raise ValueError("results has no measured row: nothing to explore")
    shapes = list(sp)
    controls = [_control("shape", "shape", [(f"{M}x{N}x{K}", f"M={M}, N={N}, K={K}") for M, N, K in shapes])]
    views = {}
    for (M, N, K), s in sp.items():
        base = baseline if baseline in s else next(iter(s))
        vals = list(s.values())
        log = max(vals) / max(min(vals), 1e-12) > 20
        views[f"{M}x{N}x{K}"] = {
            "traces": [
                {
                    "type": "bar",
                    "x": list(s),
                    "y": [_r(v) for v in vals],
                    "text": [f"{v:.3g}x" for v in vals],
                    "textposition": "outside",
                    "marker": {"color": ["#7f7f7f" if k.startswith("torch") else "#1f77b4" for k in s]},
                    "hovertemplate": "%{x}: %{y:.3g}x<extra></extra>",
                    "name": "speedup",
                }
            ],
            "layout": {
                "yaxis": {"type": "log" if log else "linear", "title": {"text": f"speedup over {base}"}},
                "title": {"text": f"{title}<br><sub>M={M}, N={N}, K={K}</sub>" if title else f"M={M}, N={N}, K={K}"},
            },
        }
    layout = {
        "xaxis": {"tickangle": -30, "automargin": True},
        "showlegend": False,
        "margin": {"t": 80, "r": 20},
        "title": {"font": {"size": 13}},
    }
    return Explorer(
        title or "Speedups",
        controls,
        views,
        layout,
        height=480,
        live=lambda: speedup_explorer(results, baseline=baseline, title=title),
    )


def rows_from_table(text: str) -> list[dict]:
    """Rows back from a printed table of :func:`quantgemm_kernels.viz.results_table` (kernel, M, N,
    K, median ms, GFLOP/s, GB/s) or ``bench.format_table`` (kernel, M, N, K, ms, TFLOPS, GB/s, ...),
    as in a notebook's stored output: lines that do not parse (headers, rules, skipped rows) are left
    out. For drawing an explorer from a stored run without repeating it."""
    rows = []
    tflops = "TFLOPS" in text  # bench.format_table's header
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 7:
            continue
        try:
            M, N, K = (int(v) for v in parts[1:4])
            ms, rate, gbps = (float(v) for v in parts[4:7])
        except ValueError:
            continue
        gflops = rate * 1e3 if tflops else rate
        rows.append(
            {
                "kernel": parts[0],
                "M": M,
                "N": N,
                "K": K,
                "median_ms": ms,
                "gflops": gflops,
                "gbps": gbps,
                "status": "ok",
            }
        )
    return rows
