"""The build on first use survives what readers do to it: a killed build (stale lock), two
notebooks building at once, an edited header, a machine without a compiler; and the core and
each appendix build apart, each keyed by the files it reads."""

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
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def fresh_env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, QUANTGEMM_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), **extra)
    return env


def test_header_edit_changes_the_build_key(tmp_path, monkeypatch):
    """torch's own check hashes only the sources it compiles; ours also hashes every header they
    include, directly or through other headers."""
    csrc = tmp_path / "csrc"
    shutil.copytree(_build.CSRC, csrc)
    monkeypatch.setattr(_build, "CSRC", csrc)
    cfg = _build.build_config(False)
    before = _build._fingerprint(cfg)
    assert _build._fingerprint(cfg) == before  # stable
    (csrc / "formats.h").write_text((csrc / "formats.h").read_text() + "\n// edited\n")
    assert _build._fingerprint(cfg) != before


def keys(with_cuda: bool) -> dict:
    return {
        e.name: _build._fingerprint(_build.build_config(with_cuda, e))
        for e in (_build.CORE, _build.APPENDIX_B, _build.APPENDIX_C)
    }


@pytest.mark.parametrize(
    "edited,changes",
    [
        ("check.h", {"core", "appendix_b", "appendix_c"}),  # the error helpers every binding includes
        ("formats.h", {"core", "appendix_b"}),  # misaligned_demo.cu reads Q4_0 blocks with it
        ("cuda/kernels.def", {"core"}),
        ("appendix_b/misaligned_demo.h", {"appendix_b"}),
        ("appendix_c/conv1d_silu_int8.h", {"appendix_c"}),
    ],
)
def test_each_extension_is_keyed_by_the_files_it_reads(tmp_path, monkeypatch, edited, changes):
    """An edit rebuilds the extensions that read the edited file, and only those."""
    csrc = tmp_path / "csrc"
    shutil.copytree(_build.CSRC, csrc)
    monkeypatch.setattr(_build, "CSRC", csrc)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")  # the CUDA configuration, without asking a GPU
    before = keys(True)
    (csrc / edited).write_text((csrc / edited).read_text() + "\n// edited\n")
    after = keys(True)
    assert {name for name in before if before[name] != after[name]} == changes


def test_each_extension_compiles_its_own_sources():
    def names(with_cuda, ext):
        return [str(p.relative_to(_build.CSRC)) for p in _build.build_config(with_cuda, ext)["sources"]]

    core = names(True, _build.CORE)
    assert core[0] == "bindings.cpp" and not any("appendix" in n or "misaligned" in n or "conv1d" in n for n in core)
    assert names(True, _build.APPENDIX_B) == ["appendix_b/bindings.cpp", "appendix_b/misaligned_demo.cu"]
    assert names(False, _build.APPENDIX_C) == ["appendix_c/bindings.cpp", "appendix_c/conv1d_silu_int8.cpp"]
    assert names(True, _build.APPENDIX_C)[-1] == "appendix_c/conv1d_silu_int8.cu"
    assert _build.APPENDIX_B.cuda_only and not _build.APPENDIX_C.cuda_only


def test_the_core_binds_no_appendix_operator():
    """quantize, dequantize, gemm (and kernel_names) under torch.ops.quantgemm; the appendices' operators
    live in their own extensions and namespaces."""
    import torch

    _build.load_extension()
    for op in ("quantize", "dequantize", "gemm", "kernel_names"):
        assert torch._C._jit_get_schemas_for_operator(f"quantgemm::{op}"), op
    for op in ("conv1d_silu_int8", "misaligned_block_sums", "misaligned_block_sums_repacked"):
        assert not torch._C._jit_get_schemas_for_operator(f"quantgemm::{op}"), op
    _build.load_appendix_c()
    assert torch._C._jit_get_schemas_for_operator("quantgemm_appendix_c::conv1d_silu_int8")


def test_the_package_does_not_import_the_appendices(tmp_path):
    code = (
        "import sys, quantgemm_kernels as qk, quantgemm_kernels.api, quantgemm_kernels.registry\n"
        "print(sorted(m for m in sys.modules if m.startswith('quantgemm_kernels.appendices')))"
    )
    r = run_python(code, fresh_env(tmp_path), 120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"


def test_stale_lock_and_concurrent_builds(tmp_path):
    """A lock file left by a killed build must not hang the next build, and two processes building
    into the same empty cache at once must both succeed (one builds, the other waits and loads)."""
    env = fresh_env(tmp_path, QUANTGEMM_NO_CUDA="1")
    tag_code = "from quantgemm_kernels import _build; print(_build.build_tag(_build.build_config(False)))"
    tag = run_python(tag_code, env, 120).stdout.strip()
    build_dir = tmp_path / "cache" / tag
    build_dir.mkdir(parents=True)
    (build_dir / "lock").write_text("")  # what torch's FileBaton leaves when a build is killed
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD_AND_USE],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
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
