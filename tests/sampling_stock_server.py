"""Test-only: ``sglang_asd.stock_server`` serving SGLang's sampling verify on CPU (see ``tests/cpu_sampling.py``)."""

from sglang_asd import stock_server  # process bootstrap first (no ASD hooks)
from tests import cpu_sampling

cpu_sampling.apply()

if __name__ == "__main__":
    stock_server.main()
