# sglang-asd: two commands.
#   make serve   set everything up, then serve the embedded CPU demo with ASD on 127.0.0.1:30000
#   make test    set everything up, then run the test suite (what CI runs)
PY := .venv/bin/python
ARGS ?=

.PHONY: setup serve test test-fast bench-verify

setup:
	bash scripts/setup_venv.sh

serve: setup
	$(PY) -m sglang_asd.launch_server $(ARGS)

test: setup
	$(PY) -m pytest -q -ra --timeout=900 tests

test-fast: setup
	$(PY) -m pytest -q -ra -m "not server" tests

bench-verify: setup
	$(PY) scripts/verify_microbench.py --out docs/verify_bench.json
