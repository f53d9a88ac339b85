"""The explorers of the built book (quantgemm_kernels/explorers.py) respond without a kernel.

For each page holding an explorer (``div.qg-explorer`` in its HTML): every explorer gets drawn by
plotly.js from the book's own ``_static`` (nothing is fetched from another host: test_pages.py
checks that for every page), and for each explorer, moving each of its controls to another value
draws another view: the ``data-qg-view`` it names changes, and so do the plotted trace data and
the SVG paths of the lines or bars. A screenshot of the page after the moves goes to
``_build/screenshots/<page>__explorers.png``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from book_site import HTML, toc_docs
from playwright.sync_api import Page


def explorer_pages() -> list[str]:
    found = []
    for doc in toc_docs():
        page = HTML / f"{doc}.html"
        if page.is_file() and 'class="qg-explorer"' in page.read_text(encoding="utf-8"):
            found.append(f"{doc}.html")
    return found


def test_the_book_has_explorers():
    """The GEMM NMSE explorer of chapter 2 at least (a build that lost them would skip the rest)."""
    assert "notebooks/02_formats.html" in explorer_pages(), (
        f"no explorer in {HTML}/notebooks/02_formats.html: is the book built (make book)?"
    )


def figure_state(page: Page, i: int) -> dict:
    """What explorer i shows: its view key, the plotted traces' data, and the SVG paths drawn."""
    return page.evaluate(
        """(i) => {
        const el = document.querySelectorAll('.qg-explorer')[i];
        const gd = el.querySelector('.qg-plot');
        return {view: el.getAttribute('data-qg-view'), draws: Number(el.getAttribute('data-qg-draws')),
                data: JSON.stringify((gd.data || []).map(t => [t.name, t.x, t.y])),
                paths: Array.from(gd.querySelectorAll('path.js-line, g.point path'))
                             .map(p => p.getAttribute('d')).join(' ')};
    }""",
        i,
    )


@pytest.mark.parametrize("path", explorer_pages())
def test_explorer_controls_change_the_figure(page: Page, book_url: str, screenshot_dir: Path, path: str):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{book_url}/{path}", wait_until="load")
    n = page.locator(".qg-explorer").count()
    assert n > 0
    page.wait_for_function(
        f"document.querySelectorAll('.qg-explorer[data-qg-mounted=yes]').length === {n}", timeout=20_000
    )
    problems = []
    for i in range(n):
        el = page.locator(".qg-explorer").nth(i)
        assert el.locator(".qg-fallback").count() == 0, "the fallback text stayed: the explorer was not drawn"
        selects = el.locator("select")
        assert selects.count() > 0, f"explorer {i} has no controls"
        for j in range(selects.count()):
            sel = selects.nth(j)
            values = sel.evaluate("s => Array.from(s.options).map(o => o.value)")
            if len(values) < 2:
                continue
            before = figure_state(page, i)
            current = sel.input_value()
            # another value whose view exists (a device may lack a shape): try them in turn
            for other in [v for v in values if v != current]:
                sel.select_option(other)
                after = figure_state(page, i)
                if after["data"] != "[]":
                    break
            name = sel.get_attribute("name")
            if after["draws"] <= before["draws"] or after["view"] == before["view"]:
                problems.append(
                    f"explorer {i}, control {name}: no new view drawn ({before['view']} -> {after['view']})"
                )
            elif after["data"] == before["data"]:
                problems.append(
                    f"explorer {i}, control {name}: {after['view']} plots the same data as {before['view']}"
                )
            elif after["paths"] == before["paths"]:
                problems.append(f"explorer {i}, control {name}: the SVG did not change ({after['view']})")
            sel.select_option(current)  # back, so the next control starts from the initial view
    shot = screenshot_dir / f"{path.removesuffix('.html').replace('/', '__')}__explorers.png"
    page.screenshot(path=str(shot), full_page=True)
    problems += [f"script error: {e}" for e in errors if "THEBE_JS_URL" not in e]
    assert not problems, f"{path}:\n  " + "\n  ".join(problems)
