#!/usr/bin/env bash
# publish.sh OUT RESULTS: copy a chain's run logs and reports from OUT (out/, never committed) into
# RESULTS (committed), the form chain_seed (steps.sh) continues from in a fresh checkout: every
# folder of OUT holding a run log (*.jsonl) with its reports (*.md, *.json, *.csv, *.png; not the
# server logs), and RESULTS/steps_done, the steps OUT marks done. Run it at a chain's milestones
# (a finished repeat or arm), then commit RESULTS.
set -euo pipefail
out=$1 results=$2
mkdir -p "$results"
for d in $(cd "$out" && find . -name '*.jsonl' -printf '%h\n' | sort -u); do
    mkdir -p "$results/$d"
    find "$out/$d" -maxdepth 1 -type f \( -name '*.jsonl' -o -name '*.md' -o -name '*.json' -o -name '*.csv' \
        -o -name '*.png' \) -exec cp -p {} "$results/$d/" \;
done
(cd "$out" && ls -1 -- *.done 2>/dev/null | sed 's/\.done$//' | sort) >"$results/steps_done"
echo "published $(cd "$out" && find . -name '*.jsonl' | wc -l) run log(s) and $(wc -l <"$results/steps_done") finished step(s) to $results"
