"""Test-only: ``sglang_asd.launch_server`` with the overlap scheduler on, on CPU (see ``tests/cpu_overlap.py``)."""

from sglang_asd import launch_server  # process bootstrap first
from tests import cpu_overlap

cpu_overlap.apply()

if __name__ == "__main__":
    launch_server.main()
