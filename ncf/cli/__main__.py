"""``python -m ncf.cli``: the ``ncf`` command (torchrun starts its ranks this way)."""

import sys

from ncf.cli import main

sys.exit(main())
