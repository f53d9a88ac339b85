"""The book's configuration: one home for the repository address, and a TOC that matches the files.

* The repository URL lives in ``_config.yml`` only. The launch buttons, the repository button
  and the pages' ``{{ repo_url }}`` all read it from there, so moving the repository is a one-line
  change. A copy anywhere else goes stale unnoticed. The one exception: the notebooks' set-up
  cells, which must clone the repository before anything can be read, carry the copy that
  tools/sync_notebooks.py writes from ``_config.yml`` (tests/test_notebook_shell.py checks it is
  current); any other copy, or one that differs from what the tool writes, fails.
* ``only_build_toc_files: true`` makes Jupyter Book skip a page that is not in ``_toc.yml``,
  silently. So every notebook and every book page must be listed. A listed file that does not
  exist fails the build, and this test says which one before a build is attempted.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def load(name: str) -> dict:
    with open(ROOT / name, encoding="utf-8") as f:
        return yaml.safe_load(f)


def toc_files(node) -> list[str]:
    """Every ``file:`` entry of a jb-book TOC, in order, root included."""
    found = [node["root"]] if "root" in node else []
    if "file" in node:
        found.append(node["file"])
    for key in ("parts", "chapters", "sections"):
        for child in node.get(key) or []:
            found.extend(toc_files(child))
    return found


def repo_files() -> list[Path]:
    """Files git tracks or would track (untracked ones that are not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell tracked files from build outputs")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def test_repository_url_is_configured():
    url = load("_config.yml")["repository"]["url"]
    parts = urlsplit(url)
    assert parts.scheme == "https" and parts.netloc == "github.com", url
    assert len(parts.path.strip("/").split("/")) == 2, f"expected https://github.com/<owner>/<repo>, got {url}"


def written_from_config(path: Path, text: str) -> str:
    """``text`` without the one copy of the address that tools/sync_notebooks.py writes from
    ``_config.yml`` into a notebook's set-up cell (the Colab bootstrap), where that copy is exactly
    what the tool writes: a copy edited by hand, or left from another address, still counts."""
    if path.suffix != ".ipynb" or path.parent != ROOT / "notebooks":
        return text
    import nbformat

    sys.path.insert(0, str(ROOT / "tools"))
    import sync_notebooks

    nb = nbformat.reads(text, as_version=4)
    cell = nb.cells[sync_notebooks.setup_cell(nb)]
    bootstrap, rest = sync_notebooks.split_bootstrap(cell.source)
    if bootstrap and bootstrap == sync_notebooks.bootstrap(path.stem):
        cell.source = rest
    return nbformat.writes(nb)


def test_repository_url_only_in_config():
    url = load("_config.yml")["repository"]["url"].rstrip("/")
    slug = urlsplit(url).path.strip("/").lower()  # owner/repo: also catches Colab and Binder links
    hits = {}
    for path in repo_files():
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        text = written_from_config(path, data.decode("utf-8", errors="replace"))
        n = text.lower().count(slug)
        if n:
            hits[path.relative_to(ROOT).as_posix()] = n
    assert hits == {"_config.yml": 1}, (
        f"'{slug}' must appear once, in _config.yml (read it from there instead); found: {hits}"
    )


def test_toc_files_exist():
    toc = load("_toc.yml")
    assert toc.get("format") == "jb-book"
    missing = [f for f in toc_files(toc) if not any((ROOT / f"{f}{ext}").is_file() for ext in (".md", ".ipynb"))]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


def test_toc_lists_each_file_once():
    files = toc_files(load("_toc.yml"))
    assert len(files) == len(set(files)), f"listed twice: {sorted({f for f in files if files.count(f) > 1})}"


@pytest.mark.parametrize("folder, pattern", [("notebooks", "*.ipynb"), ("book", "*.md")])
def test_every_page_is_in_toc(folder, pattern):
    listed = set(toc_files(load("_toc.yml")))
    pages = sorted(p for p in (ROOT / folder).glob(pattern) if ".ipynb_checkpoints" not in p.parts)
    unlisted = [
        p.relative_to(ROOT).as_posix() for p in pages if p.relative_to(ROOT).with_suffix("").as_posix() not in listed
    ]
    assert not unlisted, f"not in _toc.yml, so the book would silently leave them out: {unlisted}"


def test_book_assets_exist():
    """Files the configuration points at: the bibliography and the self-served scripts."""
    cfg = load("_config.yml")
    for bib in cfg["bibtex_bibfiles"]:
        assert (ROOT / bib).is_file(), bib
    sphinx = cfg["sphinx"]["config"]
    static = [ROOT / d for d in sphinx["html_static_path"]]
    wanted = [*sphinx["nb_ipywidgets_js"], sphinx["mathjax_path"]]
    for rel in wanted:
        assert any((d / rel).is_file() for d in static), f"{rel} not found under {sphinx['html_static_path']}"
    assert not (ROOT / "_static").exists(), "a _static folder makes Jupyter Book 1.x add all its JS to every page"


def test_notebooks_are_not_executed_by_the_build():
    """The committed outputs are the published ones (a GPU run); the build must not replace them."""
    assert load("_config.yml")["execute"]["execute_notebooks"] == "off"
