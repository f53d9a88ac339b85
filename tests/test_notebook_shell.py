"""The committed notebooks are clean and in one shape (tools/sync_notebooks.py says what that is):

* no volatile metadata: the notebook keeps kernelspec, language_info (name, version) and the saved
  widget state; a cell keeps its tags only (no execution timestamps, collapsed/scrolled flags or
  editor state), so that a commit of a notebook shows what changed in it and nothing else;
* nbval's markers are cell tags, never ``# NBVAL_...`` comment lines;
* every set-up cell starts with the bootstrap that the tool writes from ``_config.yml``'s address
  (so the address in the notebooks is the config's), is tagged ``hide-input`` and
  ``nbval-ignore-output``, and installs extras that pyproject.toml defines.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import sync_notebooks  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_in_shape(path):
    problems = sync_notebooks.check(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_nbval_comment_markers(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        assert not re.search(r"^\s*#+\s*NBVAL_", cell.source, re.M), (
            f"{path.name} cell {i}: a comment marker, not a tag"
        )


def test_extras_of_the_bootstrap_exist():
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    for stem, names in {**sync_notebooks.EXTRAS, "default": sync_notebooks.DEFAULT_EXTRAS}.items():
        for name in names.split(","):
            assert name in extras, f"{stem}: the bootstrap installs extra {name!r}, pyproject.toml has none"
    assert set(sync_notebooks.EXTRAS) <= {p.stem for p in NOTEBOOKS}, "EXTRAS names a notebook that is not there"
    # the kernel that runs the cell has an ipykernel (Colab's must stay), and torch stays as installed
    for req in extras["colab"]:
        assert not re.match(r"(ipykernel|torch|jupyter)\b", req), f"extra colab names {req}"


def _dirty(nb):
    nb = copy.deepcopy(nb)
    nb.metadata["colab"] = {"provenance": []}
    nb.metadata["language_info"]["codemirror_mode"] = {"name": "ipython", "version": 3}
    nb.cells[0].metadata["execution"] = {"iopub.execute_input": "2026-11-24T10:00:00.000Z"}
    nb.cells[-1].metadata["scrolled"] = True
    return nb


def test_the_check_finds_what_it_should(tmp_path):
    """A notebook with volatile metadata, a comment marker or another address fails the check."""
    good = nbformat.read(NOTEBOOKS[0], as_version=4)
    cases = {"volatile metadata": _dirty(good)}
    marked = copy.deepcopy(good)
    code = next(c for c in marked.cells[3:] if c.cell_type == "code")
    code.source = "# NBVAL_CHECK_OUTPUT\n" + code.source
    cases["comment marker"] = marked
    for name, nb in cases.items():
        path = tmp_path / NOTEBOOKS[0].name
        path.write_text(sync_notebooks.text(nb), encoding="utf-8")
        assert sync_notebooks.check(path), f"{name}: not found"
        fixed = sync_notebooks.sync(nbformat.read(path, as_version=4), path.stem)
        assert sync_notebooks.text(fixed) == sync_notebooks.text(good), f"{name}: sync does not restore the notebook"
    path = tmp_path / NOTEBOOKS[0].name
    path.write_text(sync_notebooks.text(good), encoding="utf-8")
    assert not sync_notebooks.check(path)
    assert sync_notebooks.check(path, url="https://github.com/someone/elsewhere"), "an address other than the config's"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    cell = nb.cells[sync_notebooks.setup_cell(nb)]
    assert set(sync_notebooks.SETUP_TAGS) <= set(cell.metadata.get("tags", []))
    bootstrap, rest = sync_notebooks.split_bootstrap(cell.source)
    assert bootstrap == sync_notebooks.bootstrap(path.stem)
    assert sync_notebooks.repo_url() in bootstrap
    assert "from quantgemm_kernels.notebook import" in rest and "setup(" in rest, "the set-up is the package's function"
