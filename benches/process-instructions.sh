#!/usr/bin/env bash
# Whole-process instructions per span: the gateway runs under callgrind while
# tailgate-loadgen sends a fixed number of spans (a fixed seed, so the same traces every
# time) to it and tailgate-sink takes what it exports; after the decisions the gateway is
# stopped with SIGTERM and callgrind's total is divided by the spans sent.
#
# CPU seconds per span from benches/load.sh move by 10 % and more between runs on a shared
# two-core machine, and with the machine itself; this count moves by well under 1 % between
# runs and says where a change of whole-process cost comes from (callgrind_annotate on the
# output). It counts user-space instructions only: the kernel's share (socket copies, thread
# wake-ups) is invisible, and `rep movsb` copies count per byte, so memcpy weighs more here
# than in time. It complements load.sh; it does not replace it.
#
# Usage: benches/process-instructions.sh <dir with tailgate, tailgate-loadgen, tailgate-sink>
#          <out dir> <protocol: grpc | http-protobuf | http-json> <spans per request>
#          <spans> [config, default benches/configs/seed.yaml]
# Prints: "<out dir> instructions=<total> per_span=<total / spans>". Uses the seed config's
# default ports (24317-24319, 23133); nothing else may hold them.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 5 ]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
BIN=$1 OUT=$2 PROTOCOL=$3 BATCH=$4 SPANS=$5 CONFIG=${6:-benches/configs/seed.yaml}
mkdir -p "$OUT"

"$BIN/tailgate-sink" --listen 127.0.0.1:24319 --stats-file "$OUT/sink.json" --max-time 10m \
  >"$OUT/sink.log" 2>&1 &
SINK=$!
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out" \
  "$BIN/tailgate" --config "$CONFIG" >"$OUT/gateway.log" 2>&1 &
GATEWAY=$!
trap 'kill "$SINK" "$GATEWAY" 2>/dev/null || true' EXIT

# Under callgrind the gateway takes some seconds to start: wait for its health endpoint.
for _ in $(seq 1 240); do
  curl -sf http://127.0.0.1:23133/ >/dev/null 2>&1 && break
  sleep 0.5
done
case $PROTOCOL in
  grpc) ENDPOINT=http://127.0.0.1:24317 ;;
  *) ENDPOINT=http://127.0.0.1:24318/v1/traces ;;
esac
"$BIN/tailgate-loadgen" --protocol "$PROTOCOL" --endpoint "$ENDPOINT" --batch-spans "$BATCH" \
  --spans "$SPANS" --seed 7 --connections 4 >"$OUT/loadgen.log" 2>&1
# The seed config decides within decision_wait (2 s); leave room for the export.
sleep 8
kill -TERM "$GATEWAY"
wait "$GATEWAY" || true
kill "$SINK" 2>/dev/null || true
wait "$SINK" 2>/dev/null || true
trap - EXIT

TOTAL=$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT/callgrind.out")
echo "$OUT instructions=$TOTAL per_span=$((TOTAL / SPANS))"
grep -E "accepted" "$OUT/loadgen.log" | head -1
