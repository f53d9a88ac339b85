"""Fixtures for the browser test of the built book (``make browser-test``).

The book in ``_build/html`` is served on 127.0.0.1 and opened in headless Chromium through
pytest-playwright. Chromium comes from the system (Debian: ``apt-get install chromium``), never
from ``playwright install``, which downloads browsers and fails on machines without internet.

Environment:
  CHROMIUM_PATH  the browser binary (default /usr/bin/chromium)
  BOOK_ROOT      the folder holding _config.yml, _toc.yml and _build/html (default: this repo)
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest
from book_site import CHROMIUM, HTML, SCREENSHOTS, load_yaml


def pytest_configure(config):
    # pytest-playwright 0.10's session-scoped base_url fixture is a method, which pytest 9 warns
    # about once per run; nothing we can change here.
    config.addinivalue_line(
        "filterwarnings", "ignore:Session-scoped fixtures defined as instance methods:pytest.PytestRemovedIn10Warning"
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request would drown pytest's output
        pass


@pytest.fixture(scope="session")
def book_url():
    """The built book, served on a free port of 127.0.0.1 for the whole session."""
    if not (HTML / "index.html").is_file():
        pytest.fail(f"no built book in {HTML}: run `make book` first (make browser-test does)")
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: `apt-get install -y chromium` (Debian) or set "
            "CHROMIUM_PATH. Do not use `playwright install`."
        )
    # The flags keep Chromium from phoning home, and from needing a sandbox or a GPU in containers.
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}}


@pytest.fixture(scope="session")
def book_config() -> dict:
    return load_yaml("_config.yml")


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
