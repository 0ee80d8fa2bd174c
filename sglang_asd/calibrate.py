"""``python -m sglang_asd.calibrate``: choose a budget from a quality target (``sglang_asd.bench.calibrate``)."""

import sys

from sglang_asd.bench.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
