"""What every chapter's set-up cell does, in one call: ``rng, device, machine, with_cuda = setup()``.

:func:`setup` seeds numpy's generator (returned as ``rng``) and torch, sends matplotlib figures
into the notebook, picks the device, names the machine, loads the compiled kernels (compiling them
on first use) and prints what it found. :func:`runs_here` says whether a registered kernel runs on
this machine: a CUDA kernel needs a GPU, the CUDA build, and a compute capability in the kernel's
range (``Kernel.min_sm`` .. ``Kernel.max_sm``: chapter 6's ``cp.async`` and ``mma.sync`` kernels
need 8.0, its ``wgmma`` kernels exactly 9.0; Colab's free T4 is 7.5).

Getting the package at all is the cell's job, before it imports anything from here: outside a
checkout of the course (Colab, a bare kernel) the cell clones the repository and installs it
(``tools/sync_notebooks.py`` writes that part of every notebook's first code cell).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from . import registry
from .bench import machine_name


class Setup(NamedTuple):
    """What :func:`setup` hands the notebook (unpack it: ``rng, device, machine, with_cuda = setup()``)."""

    rng: np.random.Generator  #: ``np.random.default_rng(seed)``: every random input of the chapter
    device: str  #: ``"cuda"`` where torch sees a GPU, else ``"cpu"``
    machine: str  #: what produced the numbers: the GPU (or the CPU), CUDA and torch versions
    with_cuda: bool  #: whether the loaded kernels include the CUDA ones


def setup(seed: int = 0, *, load: bool | str | Callable[[], bool] = True, inline: bool = True) -> Setup:
    """Seed, pick the device, load the kernels, print the machine.

    ``load`` says what loads the compiled kernels and so gives ``with_cuda``:

    * ``True``: the package's kernels, now (``quantgemm_kernels.cuda_kernels_built()``; the first
      call compiles them, about a minute, and caches the build);
    * ``"gpu"``: the same where there is a GPU; on a CPU nothing now (``with_cuda`` is False, the
      CPU kernels compile on first use);
    * a function: a chapter's own loader, whose result is ``with_cuda`` (appendix C's kernels);
    * ``False``: nothing (``with_cuda`` is False).

    ``inline``: draw matplotlib figures into the notebook, whatever backend ``MPLBACKEND`` names.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if inline:
        _matplotlib_inline()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine = machine_name(device)
    if load is True or (load == "gpu" and device == "cuda"):
        from .api import cuda_kernels_built

        with_cuda = bool(cuda_kernels_built())
    elif callable(load):
        with_cuda = bool(load())
    elif load in (False, "gpu"):
        with_cuda = False
    else:
        raise ValueError(f"load must be True, False, 'gpu' or a function, got {load!r}")
    print("device :", device)
    print("machine:", machine)
    if device == "cuda":
        print("GPU    :", gpu_line(with_cuda if load is not False else None))
    return Setup(rng, device, machine, with_cuda)


def capability() -> tuple[int, int] | None:
    """The GPU's compute capability ``(major, minor)``, or None without a GPU."""
    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


def runs_here(kernel: registry.Kernel, with_cuda: bool | None = None) -> bool:
    """Whether ``kernel`` runs on this machine. A CPU kernel always does; a CUDA kernel needs a GPU
    whose compute capability is in the kernel's range and, when ``with_cuda`` is given, the CUDA build."""
    if kernel.device == "cpu":
        return True
    cc = capability()
    return cc is not None and with_cuda is not False and kernel.runs_on(cc)


def gpu_line(with_cuda: bool | None) -> str:
    """One line on the GPU: its compute capability and which registered CUDA kernels it runs
    (``with_cuda`` None: the package's kernels were not loaded, the line gives the capability only)."""
    cc = capability()
    cuda = registry.kernels(device="cuda")
    if with_cuda is None:
        return f"compute capability {cc[0]}.{cc[1]}"
    if not with_cuda:
        return f"compute capability {cc[0]}.{cc[1]}; the CUDA kernels are not built"
    skipped = [k for k in cuda if not k.runs_on(cc)]
    line = f"compute capability {cc[0]}.{cc[1]}: {len(cuda) - len(skipped)} of the {len(cuda)} CUDA kernels run here"
    if skipped:
        needs = sorted({f"{k.min_sm[0]}.{k.min_sm[1]}" + (" exactly" if k.min_sm == k.max_sm else "") for k in skipped})
        line += f" (the others need compute capability {' or '.join(needs)}: their cells skip them)"
    return line


def _matplotlib_inline() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and shell.__class__.__name__ != "TerminalInteractiveShell":
        shell.run_line_magic("matplotlib", "inline")
