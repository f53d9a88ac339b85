"""``python -m quantgemm_kernels.bench``: see :mod:`.cli`."""

import sys

from .cli import main

sys.exit(main())
