"""Keep the notebooks' shell in one shape: the first lines of the set-up cell, nbval's markers as
cell tags, and no volatile metadata. It never touches an output, nor any other cell's source.

    python tools/sync_notebooks.py                 # rewrite notebooks/*.ipynb where they differ
    python tools/sync_notebooks.py --check [NB..]  # list what differs, exit 1 if anything does

tests/test_notebook_shell.py runs the check; pre-commit runs it on the notebooks of a commit.

* **The bootstrap**, the first lines of each notebook's first code cell (its set-up cell). Where the
  repository is not around the notebook (Colab, or any kernel started elsewhere: the package is
  not importable and ``..`` is not the repository), it clones the repository, installs the package
  with the chapter's extras (``EXTRAS``; ``colab`` leaves the running kernel's own ipykernel and
  whatever torch is installed alone), works in ``<clone>/notebooks`` and goes on. In a checkout it
  does nothing visible. The address is ``repository.url`` of ``_config.yml``, its one home
  (tests/test_book_config.py allows this copy only because this tool writes it from there);
  ``QUANTGEMM_REPO_URL`` overrides it (tests/test_colab_setup.py clones a local ``file://`` copy).
  The rest of the cell, from the first line after the bootstrap, is the chapter's.
* **The set-up cell's tags**: ``hide-input`` (the book collapses it) and ``nbval-ignore-output``
  (it prints the machine).
* **nbval's comment markers** (``# NBVAL_CHECK_OUTPUT`` on a line of its own) become the cell tags
  nbval 0.11 reads as the same thing (``nbval-check-output``, ``nbval-ignore-output``,
  ``nbval-skip``, ``raises-exception``; the last one Jupyter Book's execution honours too).
* **Volatile metadata** goes: the notebook keeps ``kernelspec``, ``language_info`` (name, version)
  and ``widgets`` (the saved widget state the static book draws); a cell keeps its ``tags`` only
  (no execution timestamps, no collapsed/scrolled flags, no editor state). Outputs, execution
  counts and cell ids stay as the executing machine wrote them (tools/execute_notebooks.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

#: the package's extras each notebook's bootstrap installs (default: DEFAULT_EXTRAS)
DEFAULT_EXTRAS = "colab"
EXTRAS = {
    "02_formats": "colab,llamacpp",
    "04_w4a8": "colab,llamacpp",
    "05_llamacpp": "colab,llamacpp",
    "07_real_model": "colab,llamacpp,model",
    "08_k_quants": "colab,llamacpp,model",
}

SETUP_TAGS = ("hide-input", "nbval-ignore-output")
MARKER_TAGS = {
    "NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
    "NBVAL_CHECK_OUTPUT": "nbval-check-output",
    "NBVAL_RAISES_EXCEPTION": "raises-exception",
    "NBVAL_SKIP": "nbval-skip",
}
MARKER_LINE = re.compile(r"^[ \t]*#+[ \t]*(" + "|".join(MARKER_TAGS) + r")[ \t]*\n?", re.M)
NOTEBOOK_METADATA = ("kernelspec", "language_info", "widgets")
LANGUAGE_INFO = ("name", "version")
CELL_METADATA = ("tags",)

BOOTSTRAP = """\
# Set-up (collapsed in the book). Where the course's repository is not around this notebook (on
# Colab, or in a kernel started elsewhere), the first lines clone it and install its package, once.
import os, subprocess, sys
from pathlib import Path

try:
    import quantgemm_kernels
except ModuleNotFoundError:
    if not Path("../quantgemm_kernels").is_dir():  # not in <repository>/notebooks
        repo = Path("{name}").resolve()
        if not repo.is_dir():
            url = os.environ.get("QUANTGEMM_REPO_URL", "{url}")
            subprocess.run(["git", "clone", "-q", "--depth=1", url, str(repo)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{{repo}}[{extras}]"], check=True)
        os.chdir(repo / "notebooks")  # work where the notebooks are, as in a checkout
    sys.path.insert(0, str(Path.cwd().parent))  # the package of the repository around the notebooks
    import quantgemm_kernels
"""


def repo_url() -> str:
    """``repository.url`` of ``_config.yml``: the one home of the repository's address."""
    with open(ROOT / "_config.yml", encoding="utf-8") as f:
        return yaml.safe_load(f)["repository"]["url"].rstrip("/")


def bootstrap(stem: str, url: str | None = None) -> str:
    """The first lines of notebook ``stem``'s set-up cell."""
    url = url or repo_url()
    name = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return BOOTSTRAP.format(url=url, name=name, extras=EXTRAS.get(stem, DEFAULT_EXTRAS))


def setup_cell(nb) -> int:
    """Index of the set-up cell: the first code cell."""
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")


def split_bootstrap(source: str) -> tuple[str, str]:
    """``(bootstrap, rest)`` of a set-up cell: the bootstrap ends after the ``try``/``except`` that
    imports the package (its last line, ``    import quantgemm_kernels``, indented)."""
    m = re.search(r"^except ModuleNotFoundError:\n(?:(?:[ \t]+.*)?\n)*?[ \t]+import quantgemm_kernels\n", source, re.M)
    if not m:
        return "", source
    return source[: m.end()], source[m.end() :]


def _add_tags(cell, tags) -> None:
    have = list(cell.metadata.get("tags", []))
    cell.metadata["tags"] = have + [t for t in tags if t not in have]


def sync(nb, stem: str, url: str | None = None):
    """``nb`` (an nbformat notebook) with its shell in shape; changed in place and returned."""
    keep = {k: nb.metadata[k] for k in NOTEBOOK_METADATA if k in nb.metadata}
    if "language_info" in keep:
        keep["language_info"] = {k: v for k, v in keep["language_info"].items() if k in LANGUAGE_INFO}
    nb.metadata = nbformat.from_dict(keep)
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: v for k, v in cell.metadata.items() if k in CELL_METADATA})
        if cell.cell_type != "code":
            continue
        found = MARKER_LINE.findall(cell.source)
        if found:
            cell.source = MARKER_LINE.sub("", cell.source)
            _add_tags(cell, [MARKER_TAGS[m] for m in found])
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    cell = nb.cells[setup_cell(nb)]
    _, rest = split_bootstrap(cell.source)
    cell.source = bootstrap(stem, url) + ("\n" + rest.lstrip("\n") if rest.strip() else "")
    _add_tags(cell, SETUP_TAGS)
    return nb


def text(nb) -> str:
    """The notebook as committed (nbformat's JSON, as tools/execute_notebooks.py writes it)."""
    return nbformat.writes(nb) + "\n"


def check(path: Path, url: str | None = None) -> list[str]:
    """What ``sync`` would change in the notebook at ``path``, one line per cell (empty: in shape)."""
    raw = path.read_text(encoding="utf-8")
    before = nbformat.reads(raw, as_version=4)
    after = sync(nbformat.reads(raw, as_version=4), path.stem, url)
    problems = []
    if before.metadata != after.metadata:
        extra = sorted(set(before.metadata) - set(after.metadata))
        problems.append(
            f"{path.name}: notebook metadata beyond {NOTEBOOK_METADATA} / language_info {LANGUAGE_INFO}: {extra or 'language_info fields'}"
        )
    for i, (b, a) in enumerate(zip(before.cells, after.cells)):
        if b.metadata != a.metadata or b.source != a.source:
            what = []
            if b.source != a.source:
                what.append(
                    "the bootstrap differs from tools/sync_notebooks.py's"
                    if i == setup_cell(after)
                    else "nbval comment marker"
                )
            if b.metadata != a.metadata:
                what.append(f"metadata {dict(b.metadata)} should be {dict(a.metadata)}")
            problems.append(f"{path.name} cell {i}: " + "; ".join(what))
    if not problems and text(before) != raw:
        problems.append(f"{path.name}: not in nbformat's JSON layout (1-space indent, trailing newline)")
    return problems


def main(argv: list[str]) -> int:
    check_only = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or sorted(NOTEBOOKS.glob("*.ipynb"))
    url = repo_url()
    problems = []
    for path in paths:
        if check_only:
            problems += check(path, url)
            continue
        raw = path.read_text(encoding="utf-8")
        new = text(sync(nbformat.reads(raw, as_version=4), path.stem, url))
        if new != raw:
            path.write_text(new, encoding="utf-8")
            print(f"{path.name}: rewritten")
    for line in problems:
        print(line)
    if problems:
        print("run `python tools/sync_notebooks.py` to fix these")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
