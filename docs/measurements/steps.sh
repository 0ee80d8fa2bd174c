# Shared by the measurement chains (docs/measurements/*/run*.sh): source it, then
# `chain_setup OUT_NAME LOG_NAME`.
#
# chain_setup OUT_NAME LOG_NAME: REPO = this checkout (a frozen worktree works: edits in the main
# tree then cannot change a running server), OUT = $REPO/out/OUT_NAME unless set, PY = the .venv of
# the main checkout (which worktrees share) unless set; exports PYTHONPATH, cds to REPO.
#
# step NAME MODULE ARGS...: run `python -m MODULE ARGS...` (`python MODULE ARGS...` when MODULE is a
# script path ending in .py, e.g. scripts/lab/speed.py) to completion (two tries: a tool exits 1
# when a server dropped requests, and the second try relaunches it and --resume redoes the lost work),
# then leave OUT/NAME.done so a later run of the chain skips it. With STOP_AFTER=NAME in the
# environment the chain ends (exit 0) once step NAME is done, so a session can queue another chain
# behind a prefix of this one.
#
# wait_for_memory GB: return once GB of memory is available (a Qwen server holds about 7 GB).
# wait_for_chains PATTERN: return once no process's command line matches PATTERN (pgrep -f): one
# measurement chain at a time on a machine; skipped with SMOKE=1.
#
# chain_seed RESULTS: OUT starts from the run logs committed under RESULTS, so a chain continues
# from the last published milestone even in a fresh checkout (out/ is never committed). Every folder
# under RESULTS that holds a run log (*.jsonl.gz as publish.sh writes it, or a plain *.jsonl) is
# copied into OUT unless OUT already has it, gzipped files written out plain (OUT holds the live
# logs the tools append to), and every step named in RESULTS/steps_done (one per line: steps whose
# whole output those logs hold) is marked done. A step that was only part done is not listed: its
# --resume continues the log.

chain_setup() {
    REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
    OUT=${OUT:-$REPO/out/$1}
    LOG_NAME=$2
    local main_checkout
    main_checkout=$(cd "$(git -C "$REPO" rev-parse --path-format=absolute --git-common-dir)/.." && pwd)
    PY=${PY:-$main_checkout/.venv/bin/python}
    export PYTHONPATH=$REPO TQDM_MININTERVAL=60
    cd "$REPO" || exit 2
    mkdir -p "$OUT"
}

log() { echo "$(date '+%F %T') $*" | tee -a "$OUT/$LOG_NAME"; }

step() {
    local name=$1 how=-m; shift
    case $1 in *.py) how= ;; esac
    if [ -e "$OUT/$name.done" ]; then log "skip $name (done)"; stop_after "$name"; return 0; fi
    for try in 1 2; do
        log "start $name (try $try): python ${how:+$how }$*"
        "$PY" $how "$@" >>"$OUT/$name.log" 2>&1
        local rc=$?
        if [ $rc -eq 0 ]; then touch "$OUT/$name.done"; log "done $name"; stop_after "$name"; return 0; fi
        log "FAILED $name (exit status $rc, log $OUT/$name.log)"
    done
    return 1
}

stop_after() {
    if [ "${STOP_AFTER:-}" = "$1" ]; then log "STOP_AFTER=$1: chain ends here"; exit 0; fi
}

chain_seed() {
    local results=$1 d s
    [ -d "$results" ] || return 0
    for d in $(cd "$results" && find . \( -name '*.jsonl' -o -name '*.jsonl.gz' \) -printf '%h\n' | sort -u); do
        [ -e "$OUT/$d" ] && continue
        mkdir -p "$OUT/$d"
        find "$results/$d" -maxdepth 1 -type f ! -name '*.gz' -exec cp -p {} "$OUT/$d/" \;
        for f in "$results/$d"/*.gz; do
            [ -e "$f" ] || continue
            s=$(basename "$f" .gz)
            gzip -dc "$f" >"$OUT/$d/$s" && touch -r "$f" "$OUT/$d/$s"
        done
        log "seeded $OUT/$d from $results/$d"
    done
    [ -f "$results/steps_done" ] || return 0
    while read -r s; do
        [ -z "$s" ] || [ -e "$OUT/$s.done" ] || { touch "$OUT/$s.done"; log "seeded $s.done"; }
    done <"$results/steps_done"
}

wait_for_memory() {
    local need_kb=$(( $1 * 1024 * 1024 ))
    while [ "$(awk '/MemAvailable/ {print $2}' /proc/meminfo)" -lt "$need_kb" ]; do
        log "waiting for $1 GB of available memory ($(awk '/MemAvailable/ {printf "%.1f", $2/1048576}' /proc/meminfo) GB now)"
        sleep 300
    done
}

wait_for_chains() {
    [ "${SMOKE:-0}" = 1 ] && return 0
    while pgrep -f "$1" >/dev/null; do
        log "waiting for the measurement chain(s) matching '$1' to finish"
        sleep 600
    done
}
