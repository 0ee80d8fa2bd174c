#!/usr/bin/env bash
# The whole test suite as two pytest runs side by side (what `make test` and CI run):
#   [server] tests marked `server`: real SGLang servers on CPU, started and shared by the pool in
#            tests/conftest.py (most of the suite's time; mostly one busy core at a time: a server's
#            start-up imports, or a client waiting on one server);
#   [other]  everything else (rules, kernels, seams, benchmark tools, subprocess checks).
# On a 2-core machine the second run uses the core the first leaves idle. Each line of output is
# prefixed with its run's name; the exit status is the worse of the two (pytest's 5, "no tests
# collected", counts as success when the arguments select tests of only one kind).
# Extra arguments go to both runs, e.g. `bash scripts/run_tests.sh -x -k identity`.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

run() {  # run NAME MARKEXPR VERBOSITY ARGS...: pytest with its output prefixed, line-buffered
    local name=$1 expr=$2 verbosity=$3; shift 3
    "$PY" -u -m pytest "$verbosity" -ra --timeout=900 -m "$expr" "$@" tests 2>&1 | sed -u "s/^/[$name] /"
    return "${PIPESTATUS[0]}"
}

start=$(date +%s)
# -v for the server tests: a line per test (each takes seconds to minutes), so progress shows
run server "server" -v "$@" &
server_pid=$!
run other "not server" -q "$@"
other_rc=$?
echo "[other] finished (exit status $other_rc) after $(( $(date +%s) - start )) s; the server tests continue"
wait "$server_pid"
server_rc=$?
echo "[server] finished (exit status $server_rc) after $(( $(date +%s) - start )) s"

ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
if ok "$server_rc" && ok "$other_rc" && ! { [ "$server_rc" -eq 5 ] && [ "$other_rc" -eq 5 ]; }; then
    exit 0
fi
exit $(( server_rc != 0 && server_rc != 5 ? server_rc : (other_rc == 5 ? 5 : other_rc) ))
