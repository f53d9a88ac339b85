import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and os.environ.get("QUANTGEMM_NO_CUDA") != "1"
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def runs_here(k) -> bool:
    """Whether registered kernel k runs on this machine (CPU kernels always; CUDA ones on a GPU of a
    compute capability they support: the wgmma kernels need exactly 9.0)."""
    return k.device == "cpu" or (HAS_CUDA and k.runs_on(torch.cuda.get_device_capability()))


def kernel_param(k):
    """pytest.param(k.name), skipped where the kernel cannot run."""
    why = "needs an NVIDIA GPU" if not HAS_CUDA else f"needs compute capability {k.min_sm} to {k.max_sm}"
    return pytest.param(k.name, marks=pytest.mark.skipif(not runs_here(k), reason=why))
