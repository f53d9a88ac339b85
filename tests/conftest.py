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
