"""Test-only: ``sglang_asd.stock_server`` with the overlap scheduler on, on CPU (see ``tests/cpu_overlap.py``)."""

from sglang_asd import stock_server  # process bootstrap first (no ASD hooks)
from tests import cpu_overlap

cpu_overlap.apply()

if __name__ == "__main__":
    stock_server.main()
