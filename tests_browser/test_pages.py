"""Open every page of the built book in headless Chromium and check what a reader would see.

Per page: it is served (200); no cell shows a traceback unless it is tagged ``raises-exception``;
every image has loaded; saved widgets are drawn; every formula is typeset by MathJax without an
error or an undefined macro; no script throws (except sphinx-thebe's known duplicate
``THEBE_JS_URL``); nothing is fetched from another host (the book must work offline, so widget
and MathJax scripts are served by the book itself) and nothing local is missing. Chapter pages
also need their Colab, Binder and repository links. A full-page screenshot of each page goes to
``_build/screenshots/`` for a human look.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from book_site import HTML, doc_source, toc_docs
from playwright.sync_api import Page

# sphinx-thebe and sphinx-togglebutton both emit the inline script that declares THEBE_JS_URL,
# so every Jupyter Book 1.x page throws this once; thebe itself still loads.
KNOWN_PAGE_ERRORS = (re.compile(r"Identifier 'THEBE_JS_URL' has already been declared"),)
# The widget bundle asks for its Font Awesome files next to the page, at
# <page folder>/@jupyter-widgets/html-manager/dist/<hash>.woff2 (webpack's public path follows the
# page, not the script). Only icons inside widget buttons need them; sliders and labels draw without.
# The book has no favicon; browsers ask for /favicon.ico anyway.
KNOWN_MISSING = (
    re.compile(r"/@jupyter-widgets/html-manager/dist/[0-9a-f]{20}\.(woff2?|ttf|eot|svg)$"),
    re.compile(r"/favicon\.ico$"),
)
SKIP_PAGES = {"genindex.html", "search.html", "index.html"}  # index.html only redirects


def pages() -> list[str]:
    """Every TOC page, plus any other page the build produced, as paths under _build/html."""
    found = [f"{doc}.html" for doc in toc_docs()]
    if HTML.is_dir():
        for p in sorted(HTML.rglob("*.html")):
            rel = p.relative_to(HTML).as_posix()
            if rel not in SKIP_PAGES and not rel.startswith(("_static/", "_sources/", "_images/")) and rel not in found:
                found.append(rel)
    return found


class PageWatch:
    """Records what goes wrong while a page loads: script errors, foreign or failed requests."""

    def __init__(self, page: Page):
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.missing: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("response", lambda r: r.status >= 400 and self.missing.append(f"{r.status} {r.url}"))
        page.route("**/*", self._route)

    def _route(self, route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:  # block it, so a test run never depends on the network and shows what would be fetched
            self.foreign.append(route.request.url)
            route.abort()


def check_math(page: Page) -> list[str]:
    """Wait for MathJax; return problems: formulas left untypeset, TeX errors, undefined macros."""
    n_math = page.locator(".math").count()
    if n_math == 0:
        return []
    try:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=15_000)
    except Exception:
        return [f"{n_math} formulas but MathJax never started (script missing or blocked?)"]
    page.evaluate("() => MathJax.startup.promise")
    problems = []
    n_typeset = page.locator(".math mjx-container").count()
    if n_typeset < n_math:
        problems.append(f"MathJax typeset {n_typeset} of {n_math} formulas")
    # MathML of every typeset formula: <merror> marks a TeX error, and an undefined macro comes out
    # as red text (MathJax's noundefined package).
    bad = page.evaluate("""() => Array.from(MathJax.startup.document.math)
        .map(m => [m.math, MathJax.startup.toMML(m.root)])
        .filter(([tex, mml]) => mml.includes('<merror') || mml.includes('mathcolor="red"'))
        .map(([tex, mml]) => tex)""")
    problems += [f"MathJax could not render: {tex!r}" for tex in bad]
    return problems


def check_widgets(page: Page) -> list[str]:
    views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if views == 0:
        return []
    if page.locator('script[type="application/vnd.jupyter.widget-state+json"]').count() == 0:
        return [f"{views} widget views but no saved widget state: the notebook was saved without it"]
    drawn = page.locator(".jupyter-widgets")
    try:
        drawn.first.wait_for(state="visible", timeout=15_000)
    except Exception:
        return [f"{views} widget views, none drawn (widget scripts missing or failing?)"]
    if drawn.count() < views:
        return [f"{views} widget views, only {drawn.count()} drawn"]
    return []


def check_launch_links(page: Page, doc: str, config: dict) -> list[str]:
    """A chapter page must offer Colab, Binder and the repository (all built from _config.yml)."""
    repo = config["repository"]["url"].rstrip("/")
    slug = urlsplit(repo).path.strip("/")
    branch = config["repository"].get("branch", "main")
    wanted = {
        "Colab": f"{config['launch_buttons']['colab_url']}/github/{slug}/blob/{branch}/{doc}.ipynb",
        "Binder": f"{config['launch_buttons']['binderhub_url']}/v2/gh/{slug}/{branch}?urlpath=lab/tree/{doc}.ipynb",
        "repository": repo,
    }
    return [
        f"no {name} link ({href})" for name, href in wanted.items() if page.locator(f'a[href="{href}"]').count() == 0
    ]


@pytest.mark.parametrize("path", pages())
def test_page(page: Page, book_url: str, book_config: dict, screenshot_dir: Path, path: str):
    assert (HTML / path).is_file(), f"{path} was not built (is its source listed in _toc.yml and present?)"
    watch = PageWatch(page)
    response = page.goto(f"{book_url}/{path}", wait_until="load")
    assert response is not None and response.status == 200, f"{path}: HTTP {response and response.status}"

    problems = []
    tracebacks = page.locator("div.cell:not(.tag_raises-exception) .output.traceback")
    if tracebacks.count():
        first = tracebacks.first.inner_text()[-400:]
        problems.append(f"{tracebacks.count()} untagged traceback(s); the first ends:\n{first}")
    broken = page.evaluate("""() => [...document.images]
        .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'))""")
    problems += [f"image did not load: {src}" for src in broken]
    problems += check_widgets(page)
    problems += check_math(page)
    doc = path.removesuffix(".html")
    source = doc_source(doc)
    if source is not None and source.suffix == ".ipynb":
        problems += check_launch_links(page, doc, book_config)

    page.screenshot(path=str(screenshot_dir / f"{doc.replace('/', '__')}.png"), full_page=True)

    problems += [f"script error: {e}" for e in watch.errors if not any(k.search(e) for k in KNOWN_PAGE_ERRORS)]
    problems += [f"fetched from another host: {u}" for u in watch.foreign]
    problems += [f"missing: {m}" for m in watch.missing if not any(k.search(m) for k in KNOWN_MISSING)]
    assert not problems, f"{path}:\n  " + "\n  ".join(problems)


def test_every_toc_page_was_built():
    missing = [doc for doc in toc_docs() if not (HTML / f"{doc}.html").is_file()]
    assert not missing, f"in _toc.yml but not in {HTML}: {missing}"


def test_index_leads_to_the_intro(page: Page, book_url: str):
    page.goto(f"{book_url}/index.html", wait_until="load")
    page.wait_for_url(re.compile(re.escape(toc_docs()[0]) + r"\.html$"), timeout=10_000)


def test_notation_page_has_typeset_math(page: Page, book_url: str):
    """The notation page is where most formulas, and the book's MathJax macros, live."""
    page.goto(f"{book_url}/book/notation.html", wait_until="load")
    assert page.locator(".math").count() >= 10, "the notation page lost its formulas?"
    assert check_math(page) == []
    assert page.locator("mjx-container").first.is_visible()
