"""``python -m quantgemm_kernels.bench``: see :mod:`.sweep`."""
import sys

from .sweep import main

sys.exit(main())
