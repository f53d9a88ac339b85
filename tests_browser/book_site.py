"""Where the book is and what its TOC lists: shared by the fixtures and the tests."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

BOOK_ROOT = Path(os.environ.get("BOOK_ROOT", Path(__file__).resolve().parent.parent)).resolve()
HTML = BOOK_ROOT / "_build" / "html"
SCREENSHOTS = BOOK_ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def load_yaml(name: str) -> dict:
    with open(BOOK_ROOT / name, encoding="utf-8") as f:
        return yaml.safe_load(f)


def toc_docs(node=None) -> list[str]:
    """Every document named in _toc.yml, root first, as paths without extension."""
    if node is None:
        toc = load_yaml("_toc.yml")
        return [toc["root"], *toc_docs(toc)]
    docs = []
    if isinstance(node, dict):
        if "file" in node:
            docs.append(node["file"])
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key) or []:
                docs.extend(toc_docs(child))
    return docs


def doc_source(doc: str) -> Path | None:
    """The source file of a TOC entry (.md or .ipynb), or None."""
    for ext in (".md", ".ipynb"):
        if (BOOK_ROOT / f"{doc}{ext}").is_file():
            return BOOK_ROOT / f"{doc}{ext}"
    return None
