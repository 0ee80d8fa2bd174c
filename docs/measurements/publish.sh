#!/usr/bin/env bash
# publish.sh OUT RESULTS: copy a chain's run logs and reports from OUT (out/, never committed) into
# RESULTS (committed), the form chain_seed (steps.sh) continues from in a fresh checkout: every
# folder of OUT holding a run log (*.jsonl) with its reports (*.md, *.json, *.csv, *.png; not the
# server logs), and RESULTS/steps_done, the steps OUT marks done.
#
# Run logs are published gzipped (NAME.jsonl -> NAME.jsonl.gz, `gzip -n`: the same log gives the
# same bytes), and so is any report over 1 MB, so that no committed file is larger; every reader
# (sglang_asd.bench.runlog: --report-only, --resume, the tables' scripts) opens NAME or NAME.gz.
# A file published in one form replaces the other. OUT keeps the live, plain logs the tools append
# to.
#
# Run it at a chain's milestones only (a finished step: an arm, a repeat, an item count), then
# commit RESULTS with one message naming the milestone; not while a step is part done.
set -euo pipefail
out=$1 results=$2
limit=1000000
mkdir -p "$results"
logs=0
for d in $(cd "$out" && find . \( -name '*.jsonl' -o -name '*.jsonl.gz' \) -printf '%h\n' | sort -u); do
    mkdir -p "$results/$d"
    while IFS= read -r -d '' f; do
        name=$(basename "$f")
        case $name in *.jsonl | *.jsonl.gz) logs=$((logs + 1)) ;; esac
        case $name in
            *.gz)   # already in published form: taken as is, unless OUT has the live plain file
                [ -e "${f%.gz}" ] && continue
                cp -p "$f" "$results/$d/$name"; rm -f "$results/$d/${name%.gz}" ;;
            *)
                if [[ $name == *.jsonl ]] || [ "$(stat -c %s "$f")" -gt $limit ]; then
                    gzip -9 -n -c "$f" >"$results/$d/$name.gz.partial"
                    touch -r "$f" "$results/$d/$name.gz.partial"
                    mv "$results/$d/$name.gz.partial" "$results/$d/$name.gz"; rm -f "$results/$d/$name"
                else
                    cp -p "$f" "$results/$d/$name"; rm -f "$results/$d/$name.gz"
                fi ;;
        esac
    done < <(find "$out/$d" -maxdepth 1 -type f \( -name '*.jsonl' -o -name '*.md' -o -name '*.json' \
        -o -name '*.csv' -o -name '*.png' -o -name '*.jsonl.gz' -o -name '*.json.gz' \) -print0)
done
(cd "$out" && ls -1 -- *.done 2>/dev/null | sed 's/\.done$//' | sort) >"$results/steps_done"
echo "published $logs run log(s) and $(wc -l <"$results/steps_done") finished step(s) to $results"
