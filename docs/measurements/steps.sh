# Shared by the measurement chains (issue12/run_all.sh, issue13/run_ablation.sh): source it, then
# `chain_setup OUT_NAME LOG_NAME`.
#
# chain_setup OUT_NAME LOG_NAME: REPO = this checkout (a frozen worktree works: edits in the main
# tree then cannot change a running server), OUT = $REPO/out/OUT_NAME unless set, PY = the .venv of
# the main checkout (which worktrees share) unless set; exports PYTHONPATH, cds to REPO.
#
# step NAME MODULE ARGS...: run `python -m MODULE ARGS...` to completion (two tries: a tool exits 1
# when a server dropped requests, and the second try relaunches it and --resume redoes the lost work),
# then leave OUT/NAME.done so a later run of the chain skips it. With STOP_AFTER=NAME in the
# environment the chain ends (exit 0) once step NAME is done, so a session can queue another chain
# behind a prefix of this one.

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
    local name=$1; shift
    if [ -e "$OUT/$name.done" ]; then log "skip $name (done)"; stop_after "$name"; return 0; fi
    for try in 1 2; do
        log "start $name (try $try): python -m $*"
        "$PY" -m "$@" >>"$OUT/$name.log" 2>&1
        local rc=$?
        if [ $rc -eq 0 ]; then touch "$OUT/$name.done"; log "done $name"; stop_after "$name"; return 0; fi
        log "FAILED $name (exit status $rc, log $OUT/$name.log)"
    done
    return 1
}

stop_after() {
    if [ "${STOP_AFTER:-}" = "$1" ]; then log "STOP_AFTER=$1: chain ends here"; exit 0; fi
}
