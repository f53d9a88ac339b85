"""Execute notebooks in place (the published outputs), then clean them for git.

    python tools/execute_notebooks.py notebooks/*.ipynb
    python tools/execute_notebooks.py --clean-only NOTEBOOK...   # clean and check, no execution

Run it on the machine whose outputs the book should show (an NVIDIA GPU for the published book).
It keeps only kernelspec/language metadata and the widget state (so the static book shows the
widgets), puts the notebook's shell in shape (tools/sync_notebooks.py: cell tags, the set-up
cell's bootstrap, no volatile cell metadata), makes traceback paths repository-relative, and fails if an output still holds a local
path. Every notebook records the machine it ran on in its own setup cell.

Figures: the kernel inherits this process's environment, and an MPLBACKEND set there (Agg on many
GPU images) would keep every figure from being displayed, so the kernel always gets the inline
backend; a cell that draws (quantgemm_kernels._nbcheck) and comes back without an image fails the run.
"""

import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from quantgemm_kernels._nbcheck import LOCAL, cells_without_figures  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
import sync_notebooks  # noqa: E402

# The kernel process inherits os.environ: whatever MPLBACKEND this shell has, figures go inline.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
SITE = re.compile(r"/[^\s'\"]*/(site-packages|dist-packages)/")


# ggml's CUDA backend logs one line per graph it captures; a timing cell captures dozens.
GGML_NOISE = re.compile(r"^ggml_backend_cuda_graph_compute: CUDA graph warmup complete\n", re.M)


def clean(text: str) -> str:
    text = SITE.sub("site-packages/", text).replace(str(ROOT) + "/", "").replace(str(ROOT), ".")
    lib = os.environ.get("QUANTGEMM_GGML_LIB")  # a standalone ggml's folder: named, not printed
    if lib:
        text = text.replace(os.path.realpath(lib), "$QUANTGEMM_GGML_LIB").replace(lib, "$QUANTGEMM_GGML_LIB")
    return GGML_NOISE.sub("", text)


def run(path: Path, timeout: int, execute: bool = True) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    t0 = time.time()
    if execute:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
        print(f"{path.name}: executed in {time.time() - t0:.1f} s", flush=True)
    widgets = nb.metadata.get("widgets")
    version = nb.metadata.get("language_info", {}).get("version", "")
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "version": version},
    }
    if widgets:
        nb.metadata["widgets"] = widgets
    problems = []
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                out["traceback"] = [clean(line) for line in out["traceback"]]
            if out.get("output_type") == "stream":
                out["text"] = clean(out["text"])
            text = json.dumps(out)
            for m in LOCAL.finditer(text):
                problems.append(f"{path.name} cell {i}: local path {m.group(0)!r}")
        # streams that cleaning emptied (they held only ggml's graph log) are dropped (code cells
        # only: a markdown cell has no outputs field, and nbformat rejects one)
        if cell.cell_type == "code":
            cell["outputs"] = [o for o in cell.outputs if o.get("output_type") != "stream" or o["text"]]
    for i in cells_without_figures(nb):
        problems.append(f"{path.name} cell {i}: draws a figure but its output holds no image")
    sync_notebooks.sync(nb, path.stem)  # the shell: tags, set-up cell, no volatile metadata
    nbformat.write(nb, path)
    return problems


if __name__ == "__main__":
    timeout = 1200
    problems = []
    args = sys.argv[1:]
    execute = "--clean-only" not in args  # clean and check outputs already there (e.g. fetched from a GPU)
    for p in (a for a in args if a != "--clean-only"):
        problems += run(Path(p).resolve(), timeout, execute)
    for line in problems:
        print("PROBLEM:", line)
    sys.exit(1 if problems else 0)
