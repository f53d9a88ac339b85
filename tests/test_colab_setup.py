"""A chapter opened where the repository is not around it (Colab's launch button, any bare kernel)
sets itself up from its first cell: it clones the repository, installs the package, works in
``<clone>/notebooks`` and goes on as in a checkout.

The test runs chapter 1's set-up cell, as committed, as a script in an empty folder:

* the cell clones this repository through a ``file://`` URL (``QUANTGEMM_REPO_URL`` overrides the
  address that tools/sync_notebooks.py wrote into the cell from ``_config.yml``), so nothing is
  downloaded; the clone holds the last commit, not the working tree;
* the interpreter is a throwaway venv that sees this environment's packages (through a ``.pth``
  file naming a folder of links to them) but not the quantgemm_kernels that this checkout installed
  into it: the cell's ``pip install -e`` goes into the throwaway venv and never touches ours;
* pip's own environment variables make the install offline and fast (``PIP_NO_DEPS``,
  ``PIP_NO_INDEX``, and ``PIP_NO_BUILD_ISOLATION=0``, which in pip's spelling turns isolation off):
  the dependencies are already there. The cell itself installs them, as on Colab.

Afterwards the package must import from the clone, in the cell's process and in a new one (Colab
after a restart), the cell's variables must be there and the editable install must point at the clone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import sync_notebooks  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "01_fp32_baseline.ipynb"
HIDDEN = ("quantgemm_kernels", "__editable__", "__pycache__")  # this checkout's install, not linked


def setup_source(path: Path = NOTEBOOK) -> str:
    nb = nbformat.read(path, as_version=4)
    return nb.cells[sync_notebooks.setup_cell(nb)].source


def throwaway_venv(where: Path) -> Path:
    """A venv without pip whose interpreter imports this environment's packages, but for the
    package of this checkout: returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = Path(sysconfig.get_paths()["purelib"])
    view = where / "view"
    view.mkdir()
    for entry in ours.iterdir():
        if not entry.name.startswith(HIDDEN) and not entry.name.endswith(".pth"):
            (view / entry.name).symlink_to(entry)
    Path(purelib, "zz_test_environment.pth").write_text(f"{view}\n", encoding="utf-8")
    return python


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_setup_cell_clones_installs_and_imports(tmp_path):
    python = throwaway_venv(tmp_path / "venv")
    work = tmp_path / "colab"
    work.mkdir()
    probe = textwrap.dedent("""

        # ---- the test's probe, after the cell
        import json
        from importlib import metadata
        dist = metadata.distribution("quantgemm-kernels")
        print("PROBE", json.dumps({
            "package": quantgemm_kernels.__file__, "cwd": os.getcwd(),
            "names": sorted(n for n in ("rng", "device", "machine", "with_cuda", "qk", "nmse") if n in globals()),
            "direct_url": dist.read_text("direct_url.json"),
        }))
    """)
    script = work.parent / "cell.py"
    script.write_text(setup_source() + probe, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(
        # file://: git honours --depth=1; QUANTGEMM_TEST_REMOTE: another repository's commit instead
        QUANTGEMM_REPO_URL=os.environ.get("QUANTGEMM_TEST_REMOTE", ROOT.as_uri()),
        PIP_NO_DEPS="1",
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        MPLBACKEND="Agg",
    )
    p = subprocess.run([str(python), str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, f"the set-up cell failed in an empty folder:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    import json

    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("PROBE "))
    got = json.loads(line.removeprefix("PROBE "))
    clone = work / sync_notebooks.repo_url().rsplit("/", 1)[-1]
    assert Path(got["package"]).resolve() == (clone / "quantgemm_kernels" / "__init__.py").resolve(), got
    assert Path(got["cwd"]).resolve() == (clone / "notebooks").resolve(), got
    assert got["names"] == sorted(["rng", "device", "machine", "with_cuda", "qk", "nmse"]), got
    direct = json.loads(got["direct_url"])
    assert direct["dir_info"].get("editable") and Path(direct["url"].removeprefix("file://")) == clone.resolve()
    assert "device :" in p.stdout and "machine:" in p.stdout, p.stdout

    # A new process (Colab after a restart) imports the clone's package through the editable install.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    q = subprocess.run(
        [str(python), "-c", "import quantgemm_kernels; print(quantgemm_kernels.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert q.returncode == 0, q.stderr
    assert Path(q.stdout.strip()).resolve().is_relative_to(clone.resolve()), q.stdout


def test_setup_cell_in_a_checkout_does_nothing_visible(tmp_path):
    """In a checkout the bootstrap neither clones nor installs: it leaves the folder as it was."""
    bootstrap, _ = sync_notebooks.split_bootstrap(setup_source())
    assert bootstrap, "no bootstrap in the set-up cell"
    env = {k: v for k, v in os.environ.items() if k != "QUANTGEMM_REPO_URL"}
    env["QUANTGEMM_REPO_URL"] = (tmp_path / "nowhere").as_uri()  # a clone would fail loudly
    p = subprocess.run(
        [sys.executable, "-c", bootstrap + "\nprint(quantgemm_kernels.__file__)"],
        cwd=ROOT / "notebooks",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("__init__.py") and not p.stderr.strip(), (p.stdout, p.stderr)
    assert not (ROOT / "notebooks" / sync_notebooks.repo_url().rsplit("/", 1)[-1]).exists()
