# Shared by the measurement chains (issue12/run_all.sh, issue13/run_ablation.sh); source it after
# setting OUT, PY and LOG_NAME.
#
# step NAME MODULE ARGS...: run `python -m MODULE ARGS...` to completion (two tries: a tool exits 1
# when a server dropped requests, and the second try relaunches it and --resume redoes the lost work),
# then leave OUT/NAME.done so a later run of the chain skips it.

log() { echo "$(date '+%F %T') $*" | tee -a "$OUT/$LOG_NAME"; }

step() {
    local name=$1; shift
    if [ -e "$OUT/$name.done" ]; then log "skip $name (done)"; return 0; fi
    for try in 1 2; do
        log "start $name (try $try): python -m $*"
        "$PY" -m "$@" >>"$OUT/$name.log" 2>&1
        local rc=$?
        if [ $rc -eq 0 ]; then touch "$OUT/$name.done"; log "done $name"; return 0; fi
        log "FAILED $name (exit status $rc, log $OUT/$name.log)"
    done
    return 1
}
