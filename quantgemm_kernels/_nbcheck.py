"""Which notebook cells draw a figure, and which of those store no image: the book shows nothing there.

Shared by ``tools/execute_notebooks.py`` (it fails when a drawing cell comes back without an image)
and ``tests/test_notebook_figures.py`` (every committed notebook). It reads a notebook's JSON as a
dict (``json.load`` or ``nbformat.read``) and imports nothing of Jupyter's.

A cell draws when its source calls a plotting helper (``plot_...(``, ``draw_...(``), creates a figure
(``plt.subplots``, ``plt.figure``) or shows an image (``.imshow(``); a cell that only defines a
function (its source starts with ``def ``) draws nothing itself.
"""

from __future__ import annotations

import json
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


#: A path of the machine that executed a notebook (its checkout, a temporary folder, a home): the
#: book must not show one, in a cell's source or in its outputs.
LOCAL = re.compile(r"/(work|root|home|tmp|opt)/[A-Za-z0-9_.-]+")


def local_paths(nb) -> list[tuple[int, str]]:
    """(cell index, path) for every local path in a notebook's sources and outputs."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        text = _source(cell) + "".join(json.dumps(o) for o in cell.get("outputs", []))
        found += [(i, m.group(0)) for m in LOCAL.finditer(text)]
    return found
