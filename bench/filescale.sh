#!/usr/bin/env bash
# The file store at scale (make scale-file): writes KEYS live keys, then
# restarts the store in fresh processes: from the index snapshot written
# at close; after KEYS/10 more keys and an exit without Close, from the
# snapshot and the log since; with no snapshot (the whole log replayed).
# Prints bytes per live key and restart times; docs/bench/FILE-INDEX.md
# quotes them.
set -euo pipefail
keys=${1:-10000000}
dir=$(mktemp -d "${SCALE_DIR:-/tmp}/idem-filescale.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$(dirname "$0")"
go build -o "$dir.bin" ./cmd/storescale
trap 'rm -rf "$dir" "$dir.bin"' EXIT
echo "== $keys keys in $dir ($(date -u +%FT%TZ), $(nproc) cores)"
"$dir.bin" -dir "$dir/s" -keys "$keys" fill
du -sh "$dir/s"
ls -l "$dir/s/index.snap"
echo "== restart from the snapshot"
"$dir.bin" -dir "$dir/s" -keys "$keys" open
echo "== $((keys / 10)) more keys, then an exit without Close (a kill); restart from the snapshot and the log since"
"$dir.bin" -dir "$dir/s" -keys $((keys / 10)) -from "$keys" crash
"$dir.bin" -dir "$dir/s" -keys "$keys" open
echo "== restart with no snapshot: the whole log replayed"
mv "$dir/s/index.snap" "$dir/index.snap.saved"
"$dir.bin" -dir "$dir/s" -keys "$keys" open
