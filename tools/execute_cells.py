"""Execute some cells of a notebook and store the outputs of some of them, leaving every other cell
(and the notebook's metadata) as it is: for a cell whose output changes with the code it prints (an
excerpt, a kernel list) in a chapter whose other outputs come from a GPU run that this machine
cannot repeat.

    python tools/execute_cells.py NOTEBOOK --store 12,13 [--context 5,9]

The kernel starts in notebooks/, runs the set-up cell (the first code cell), then the ``--context``
cells (outputs discarded: the definitions the stored cells need) and the ``--store`` cells in
notebook order; indices are positions in the notebook's cell list. A stored cell that raises
fails the run and nothing is written. Then `tools/execute_notebooks.py --clean-only NOTEBOOK`.
"""

import argparse
import copy
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def _indices(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()] if text else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--store", required=True, help="comma-separated cell indices whose outputs are stored")
    ap.add_argument("--context", default="", help="comma-separated cell indices run first, outputs discarded")
    ap.add_argument("--timeout", type=int, default=1200)
    a = ap.parse_args(argv)
    store, context = _indices(a.store), _indices(a.context)
    nb = nbformat.read(a.notebook, as_version=4)
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    for i in store + context:
        if not 0 <= i < len(nb.cells) or nb.cells[i].cell_type != "code":
            ap.error(f"cell {i} is not a code cell of {a.notebook} ({len(nb.cells)} cells)")
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    client = NotebookClient(
        nb, timeout=a.timeout, kernel_name="python3", resources={"metadata": {"path": str(a.notebook.parent)}}
    )
    done = {}
    with client.setup_kernel():
        for i in sorted({setup, *context, *store}):
            cell = nb.cells[i] if i in store else copy.deepcopy(nb.cells[i])
            client.execute_cell(cell, i)
            errors = [o for o in cell.outputs if o.output_type == "error"]
            if errors and i in store and "raises-exception" not in cell.metadata.get("tags", []):
                print(f"cell {i} raised {errors[0].ename}: {errors[0].evalue}", file=sys.stderr)
                return 1
            if i in store:
                done[i] = (cell.outputs, cell.execution_count)
                print(f"cell {i}: {len(cell.outputs)} output(s)")
    fresh = nbformat.read(a.notebook, as_version=4)
    for i, (outputs, count) in done.items():
        fresh.cells[i].outputs, fresh.cells[i].execution_count = outputs, count
    nbformat.write(fresh, a.notebook)
    return 0


if __name__ == "__main__":
    sys.exit(main())
