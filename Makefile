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

# Two phases: the tests that start no server on two pytest workers (pytest-xdist; mostly single-threaded
# work and subprocess imports), then the server tests in one process (they keep both cores busy
# themselves and share a pool of servers, tests/conftest.py). Both phases always run; the exit status
# is the first failure's.
test: setup
	@status=0; \
	$(PY) -m pytest -q -ra --timeout=900 -n 2 -m "not server" tests || status=$$?; \
	$(PY) -m pytest -q -ra --timeout=900 -m server tests || { s=$$?; [ $$status -ne 0 ] || status=$$s; }; \
	exit $$status

test-fast: setup
	$(PY) -m pytest -q -ra -n 2 -m "not server" tests

bench-verify: setup
	$(PY) scripts/verify_microbench.py --sampled --out docs/verify_bench.json
