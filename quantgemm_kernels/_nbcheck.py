"""Which notebook cells draw a figure, and which of those store no image: the book shows nothing there.

Shared by ``tools/execute_notebooks.py`` (it fails when a drawing cell comes back without an image)
and ``tests/test_notebook_figures.py`` (every committed notebook). It reads a notebook's JSON as a
dict (``json.load`` or ``nbformat.read``) and imports nothing of Jupyter's.

A cell draws when its source calls a plotting helper (``plot_...(``, ``draw_...(``), creates a figure
(``plt.subplots``, ``plt.figure``) or shows an image (``.imshow(``); a cell that only defines a
function (its source starts with ``def ``) draws nothing itself.
"""

from __future__ import annotations

import re

DRAWS = re.compile(r"(\bplot_\w+\(|plt\.subplots|plt\.figure|\.imshow\(|draw_\w+\()")
#: Output types the book renders as a figure (a widget's view counts: the book embeds its state).
IMAGE_TYPES = frozenset({"image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json"})


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def draws(cell) -> bool:
    """Whether a cell draws a figure (see the module's docstring)."""
    src = _source(cell)
    return cell.get("cell_type") == "code" and bool(DRAWS.search(src)) and not src.lstrip().startswith("def ")


def has_image(cell) -> bool:
    """Whether a cell stores an output the book renders as a figure."""
    return any(IMAGE_TYPES & set(out.get("data", {})) for out in cell.get("outputs", []))


def cells_without_figures(nb) -> list[int]:
    """Indices (in ``nb["cells"]``) of the cells that draw but store no image."""
    return [i for i, cell in enumerate(nb.get("cells", [])) if draws(cell) and not has_image(cell)]
