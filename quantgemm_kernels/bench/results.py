"""Results on disk: a row per (kernel, shape), the header that says what produced the numbers, and
the one writer and reader of result files.

A row is a :class:`Row`; its fields are the columns (:data:`COLUMNS` describes each), and it
travels as a plain dict (:meth:`Row.to_dict`, :meth:`Row.from_dict`), which is what sweeps return
and notebooks index. :func:`write_results` writes ``results-<time>.csv`` (the header as
``# key: value`` lines above the table) and ``.json`` (``{"header", "columns", "rows"}``);
:func:`load_results` reads either back. :func:`write_json` and :func:`write_csv` are the two
formats alone, for the records of the GPU measurement and the appendices. :func:`make_header`
records the machine, date, commit, torch and threads.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import json
import os
import platform
from pathlib import Path

import torch

from .machine import cpu_model, git_commit, machine_name, machine_slug


def _col(doc: str, default=dataclasses.MISSING):
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclasses.dataclass
class Row:
    """One (kernel, shape) of a sweep: what ran, how it was timed, and what came out."""

    kernel: str = _col("registry name (ggml_<device>_<wfmt>: llama.cpp's own mul_mat)")
    source: str = _col("ours or llama.cpp (the entry's side)")
    device: str = _col("cpu or cuda")
    wfmt: str = _col("weight format")
    afmt: str = _col("activation format the kernel reads")
    chapter: int = _col("chapter that introduces the kernel")
    M: int = _col("output features (llama.cpp m)")
    N: int = _col("tokens (n)")
    K: int = _col("reduction (k)")
    status: str = _col("ok, skipped or error", "ok")
    reason: str = _col("why skipped or failed", "")
    median_ms: float | None = _col("median time of one call", None)
    min_ms: float | None = _col("fastest call", None)
    reps: int = _col("timed samples", 0)
    batch: int = _col(
        "calls per sample: 1 = call by call; R = R back-to-back calls (ggml: R mul_mat nodes in one graph)", 1
    )
    timing: str = _col(
        "events (CUDA events around Python calls), cuda-graph (replay of captured calls), perf_counter (CPU), ggml", ""
    )
    cache: str | None = _col(
        "warm (the same weights every call) or cold (rotation over copies >= 4x the L2 on a GPU, the "
        "last-level cache on a CPU); n/a in CPU records before the CPU had a cold regime",
        None,
    )
    copies: int = _col("weight copies rotated over (1: warm)", 1)
    tflops: float | None = _col("2*M*N*K / median time / 1e12", None)
    gflops: float | None = _col("the same in GFLOP/s", None)
    gbps: float | None = _col("bytes / median time / 1e9", None)
    bytes: int | None = _col("fewest bytes a call must move (weights, activations as read, C)", None)
    est_ms: float | None = _col("estimated time of one call from probe runs (slow kernels only)", None)
    act_quant_timed: bool = _col("the activations' quantization is inside the timed region", False)
    baseline: str = _col("naive kernel the speedup is measured against", "")
    speedup_vs_naive: float | None = _col("baseline time / this time", None)
    speedup_basis: str = _col("measured or estimated baseline time", "")

    def __post_init__(self):
        if self.cache is None:  # records written before the cache column were timed warm
            self.cache = "warm" if self.device == "cuda" else "n/a"

    def to_dict(self) -> dict:
        """The row as a dict of plain values, in column order."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Row":
        """A row from a dict as :meth:`to_dict`, a JSON record or a CSV table (empty cells: None)
        gives it. Columns missing from older records take their defaults; keys that are not
        columns are left out."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kw = {}
        for name, value in d.items():
            if name not in known:
                continue
            if value is None and known[name].default == "":  # a text column's empty CSV cell
                value = ""
            kw[name] = value
        return cls(**kw)


#: Every column of a row, with what it holds.
COLUMNS: dict[str, str] = {f.name: f.metadata["doc"] for f in dataclasses.fields(Row)}


def make_header(device: str = "cpu", **extra) -> dict:
    """What produced the numbers: machine, date, git commit, torch, threads (plus ``extra``)."""
    commit, dirty = git_commit()
    now = _dt.datetime.now().astimezone()
    header = {
        "tool": "quantgemm_kernels.bench",
        "machine": machine_name(device),
        "machine_slug": machine_slug(device),
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "date": now.isoformat(timespec="seconds"),
        "git_commit": commit,
        "git_dirty": dirty,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        # other work on the machine slows a CPU run: the load before it started says how much
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "timing": "median over samples after warm-up; CUDA events on a GPU, perf_counter on a CPU; "
        "our rows: the compiled operator, inputs checked once before timing; a sample is `batch` "
        "back-to-back calls, time / batch (batch 1: call by call); "
        "llama.cpp rows: test-backend-ops style (one graph of repeated mul_mat nodes, time / repeats)",
    }
    header.update(extra)
    return header


def stamp() -> str:
    """The time part of a result file's name: ``HHMMSS``."""
    return _dt.datetime.now().strftime("%H%M%S")


def write_json(path, rows: list[dict], header: dict, columns: dict) -> Path:
    """``{"header", "columns", "rows"}`` as JSON at ``path`` (its folder is made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"header": header, "columns": columns, "rows": rows}, f, indent=1, default=str)
        f.write("\n")
    return path


def write_csv(path, rows: list[dict], header: dict, columns) -> Path:
    """The header as ``# key: value`` lines (values in JSON), then a table of ``columns`` (None as
    an empty cell, other keys left out), at ``path`` (its folder is made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        for key, value in header.items():
            f.write(f"# {key}: {json.dumps(value, default=str)}\n")
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
    return path


def write_results(rows: list[dict], header: dict, out_dir) -> tuple[Path, Path]:
    """Write ``results-<time>.csv`` (header as ``# key: value`` lines) and ``.json`` in ``out_dir``."""
    stem = Path(out_dir) / f"results-{stamp()}"
    json_path = write_json(stem.with_suffix(".json"), rows, header, COLUMNS)
    csv_path = write_csv(stem.with_suffix(".csv"), rows, header, COLUMNS)
    return csv_path, json_path


def _csv_value(text: str):
    if text == "":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def read_json(path) -> dict:
    """``{"header", "rows", "path"}`` of one JSON file that :func:`write_json` wrote."""
    with open(path) as f:
        data = json.load(f)
    return {"header": data["header"], "rows": data["rows"], "path": str(path)}


def load_results(path) -> dict:
    """``{"header", "rows"}`` from a results JSON or CSV file, or from a folder (its newest JSON,
    searched recursively). For a table: ``pandas.DataFrame(load_results(p)["rows"])``; for typed
    rows: ``[Row.from_dict(r) for r in load_results(p)["rows"]]``."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.rglob("*.json"), key=lambda q: q.stat().st_mtime)
        if not found:
            raise FileNotFoundError(f"no results .json under {p}")
        p = found[-1]
    if p.suffix == ".json":
        return read_json(p)
    header, lines = {}, []
    with open(p, newline="") as f:
        for line in f:
            if line.startswith("# ") and ": " in line and not lines:
                key, value = line[2:].rstrip("\n").split(": ", 1)
                try:
                    header[key] = json.loads(value)
                except json.JSONDecodeError:
                    header[key] = value
            else:
                lines.append(line)
    rows = [{k: _csv_value(v) for k, v in r.items()} for r in csv.DictReader(lines)]
    return {"header": header, "rows": rows, "path": str(p)}


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table, one line per (kernel, shape)."""
    head = f"{'kernel':<26} {'M':>5} {'N':>4} {'K':>6} {'ms':>10} {'TFLOPS':>8} {'GB/s':>7} {'x naive':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = f"{r['kernel']:<26} {r['M']:>5} {r['N']:>4} {r['K']:>6}"
        if r["status"] != "ok":
            lines.append(f"{shape}   {r['status']}: {r['reason']}")
            continue
        sp = r["speedup_vs_naive"]
        sp_txt = "" if sp is None else f"{sp:.3g}" + ("~" if r["speedup_basis"] == "estimated" else "")
        lines.append(f"{shape} {r['median_ms']:>10.4g} {r['tflops']:>8.3g} {r['gbps']:>7.3g} {sp_txt:>8}")
    return "\n".join(lines)


def cold_warm_table(cold: list[dict], warm: list[dict]) -> str:
    """Per (kernel, shape) timed both ways: the cold and the warm median and their ratio."""
    key = lambda r: (r["kernel"], r["M"], r["N"], r["K"])  # noqa: E731
    w = {key(r): r for r in warm if r["status"] == "ok"}
    head = f"{'kernel':26s} {'M':>5s} {'N':>4s} {'K':>6s} {'cold ms':>10s} {'warm ms':>10s} {'cold/warm':>9s}"
    lines = [head, "-" * len(head)]
    for r in cold:
        if r["status"] == "ok" and key(r) in w:
            lines.append(
                f"{r['kernel']:26s} {r['M']:5d} {r['N']:4d} {r['K']:6d} {r['median_ms']:10.4g} "
                f"{w[key(r)]['median_ms']:10.4g} {r['median_ms'] / w[key(r)]['median_ms']:9.2f}"
            )
    return "\n".join(lines)
