"""Every committed notebook stores the figures it draws: a drawing cell without an image output
shows nothing in the book (notebooks executed with MPLBACKEND=Agg inherited by the kernel did that).
Re-execute such a notebook with tools/execute_notebooks.py, which forces the inline backend."""

import json
from pathlib import Path

import pytest

from quantgemm_kernels._nbcheck import cells_without_figures, draws, has_image, local_paths

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_drawing_cells_store_an_image(path):
    nb = json.loads(path.read_text())
    missing = cells_without_figures(nb)
    assert not missing, (
        f"{path.name}: cell(s) {', '.join(map(str, missing))} draw a figure but store no "
        f"image output (image/png, image/svg+xml or a widget): re-execute the notebook "
        f"with tools/execute_notebooks.py"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_local_paths(path):
    """No cell's source or output shows a path of the machine that executed it."""
    found = local_paths(json.loads(path.read_text()))
    assert not found, f"{path.name}: local paths {found[:5]}"


def test_local_path_detection():
    nb = {
        "cells": [
            {"cell_type": "code", "source": "x = 1\n", "outputs": []},
            {"cell_type": "code", "source": 'run("/tmp/variants")', "outputs": []},
            {"cell_type": "code", "source": "", "outputs": [{"output_type": "stream", "text": "at /work/main/x.py"}]},
        ]
    }
    assert local_paths(nb) == [(1, "/tmp/variants"), (2, "/work/main")]


def test_detection():
    def cell(src, *data):
        return {
            "cell_type": "code",
            "source": src,
            "outputs": [{"output_type": "display_data", "data": d} for d in data],
        }

    assert draws(cell("fig, ax = plt.subplots()\n")) and draws(cell(["x = 1\n", "viz.plot_roofline(rows)"]))
    assert draws(cell("ax.imshow(grid)")) and draws(cell("draw_tiles(ax)")) and draws(cell("plt.figure()"))
    assert not draws(cell("def plot_it(rows):\n    fig, ax = plt.subplots()\n"))  # a definition draws nothing
    assert not draws(cell("print(plot_names)")) and not draws({"cell_type": "markdown", "source": "plt.figure()"})
    assert not has_image(cell("plt.figure()", {"text/plain": "<Figure size 640x480 with 0 Axes>"}))
    for kind in ("image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json"):
        assert has_image(cell("plt.figure()", {"text/plain": "", kind: "..."}))
    nb = {"cells": [cell("plt.figure()"), cell("plt.figure()", {"image/png": "..."}), cell("x = 1")]}
    assert cells_without_figures(nb) == [0]
