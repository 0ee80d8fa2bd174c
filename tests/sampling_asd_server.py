"""Test-only: ``sglang_asd.launch_server`` serving SGLang's sampling verify on CPU (see ``tests/cpu_sampling.py``)."""

from sglang_asd import launch_server  # process bootstrap first
from tests import cpu_sampling

cpu_sampling.apply()

if __name__ == "__main__":
    launch_server.main()
