"""The build on first use survives what readers do to it: a killed build (stale lock), two
notebooks building at once, an edited header, a machine without a compiler."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from quantgemm_kernels import _build

ROOT = Path(__file__).resolve().parent.parent

BUILD_AND_USE = textwrap.dedent("""
    import torch, quantgemm_kernels as qk
    q = qk.quantize(torch.ones(2, 32), "q8_0")
    print("OK", q.shape[1])
""")


def run_python(code: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def fresh_env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, QUANTGEMM_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), **extra)
    return env


def test_header_edit_changes_the_build_key(tmp_path, monkeypatch):
    """torch's own check hashes only the sources it compiles; ours hashes every file under csrc/."""
    csrc = tmp_path / "csrc"
    shutil.copytree(_build.CSRC, csrc)
    monkeypatch.setattr(_build, "CSRC", csrc)
    cfg = _build.build_config(False)
    before = _build._fingerprint(cfg)
    assert _build._fingerprint(cfg) == before  # stable
    (csrc / "formats.h").write_text((csrc / "formats.h").read_text() + "\n// edited\n")
    assert _build._fingerprint(cfg) != before


def test_stale_lock_and_concurrent_builds(tmp_path):
    """A lock file left by a killed build must not hang the next build, and two processes building
    into the same empty cache at once must both succeed (one builds, the other waits and loads)."""
    env = fresh_env(tmp_path, QUANTGEMM_NO_CUDA="1")
    tag_code = ("from quantgemm_kernels import _build; c = _build.build_config(False); "
                "print('cpu-' + _build._fingerprint(c))")
    tag = run_python(tag_code, env, 120).stdout.strip()
    build_dir = tmp_path / "cache" / tag
    build_dir.mkdir(parents=True)
    (build_dir / "lock").write_text("")  # what torch's FileBaton leaves when a build is killed
    procs = [subprocess.Popen([sys.executable, "-c", BUILD_AND_USE], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "OK 34" in out
    # exactly one process compiled; both print at most one status line
    status_lines = [line for _, err in outs for line in err.splitlines() if "quantgemm_kernels: compiling" in line]
    assert len(status_lines) == 1, status_lines


def test_missing_compiler_gives_a_clear_message(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    env = fresh_env(tmp_path, QUANTGEMM_NO_CUDA="1", PATH=str(fake_bin), CXX="no-such-compiler")
    code = textwrap.dedent("""
        import torch, numpy as np, quantgemm_kernels as qk
        x = np.ones((1, 32), np.float32)
        print("reference still works:", qk.formats.quantize(x, "q8_0").shape)
        try:
            qk.quantize(torch.from_numpy(x), "q8_0")
        except RuntimeError as e:
            print("ERROR:", e)
    """)
    r = run_python(code, env, 300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "reference still works: (1, 34)" in r.stdout
    assert "no C++ compiler found" in r.stdout
