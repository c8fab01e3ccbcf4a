#!/usr/bin/env bash
# Whole-process load bench: tailgate-loadgen -> gateway -> tailgate-sink, all on loopback.
#
# For each scenario it starts a fresh sink and a fresh gateway (tailgate with --config, and
# rotel in pass-through as the peer), drives the gateway with tailgate-loadgen for a bounded
# time, waits for the sink to drain, and reports for the gateway process:
#   spans/s accepted, CPU seconds per million spans (utime+stime from /proc/<pid>/stat,
#   read before and after the load), idle RSS and peak RSS (VmRSS before the load, VmHWM
#   after), the delay from a trace's root span end (= when the loadgen made it) to its
#   arrival at the sink (p50/p99), refusals; and, with a tail sampler, the most spans it
#   held at once (its tailgate_sampler_spans_held, polled every 0.25 s with the gateway's
#   VmRSS) and the RSS above idle per held span at that moment, beside the bytes per held
#   span the sampler charges (tailgate_sampler_bytes_held); then the same RSS per held span
#   as a median over the plateau of most spans held, and the RSS one more held span adds
#   while the buffer fills (see held_stats).
# Results: a Markdown table on stdout and in $OUT/results.md, raw JSON in $OUT/.
#
# Usage: benches/load.sh [--config FILE]... [--duration 25s] [--rate SPANS_PER_SEC]
#                        [--scenarios "grpc grpc-max ..."] [--peer-scenarios "grpc grpc-max"]
#                        [--no-peer] [--no-build] [--out DIR]
# Scenarios: grpc grpc-max grpc-600 grpc-60 grpc-gzip http-protobuf http-json
# http-protobuf-max http-json-max large-attributes many-traces,
# and grpc-tls grpc-tls-max (gRPC over TLS: made to run with a config whose name holds
# "tls", such as benches/configs/seed-tls.yaml, for which this script makes a throwaway CA
# and server certificate with openssl; TLS scenarios run only with such configs, the others
# only with the rest).
# --config may be given more than once: each scenario then runs every config in turn, in
# the order given, so that configs compared with each other share the machine's state.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIGS=()
DURATION=25s
RATE=20000
SCENARIOS="grpc grpc-max grpc-gzip http-protobuf http-json large-attributes many-traces"
PEER_SCENARIOS="grpc grpc-max"
PEER=1
BUILD=1
TARGET=${CARGO_TARGET_DIR:-target}
OUT=$TARGET/load-bench

while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIGS+=("$2"); shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    --peer-scenarios) PEER_SCENARIOS=$2; shift 2 ;;
    --no-peer) PEER=0; shift ;;
    --no-build) BUILD=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 1 ;;
  esac
done
[ "${#CONFIGS[@]}" -gt 0 ] || CONFIGS=(benches/configs/passthrough.yaml)

BIN=$TARGET/release
mkdir -p "$OUT"
RESULTS=$OUT/results.md

# Loopback ports, read by benches/configs/*.yaml.
export TAILGATE_BENCH_GRPC=127.0.0.1:24317
export TAILGATE_BENCH_HTTP=127.0.0.1:24318
export TAILGATE_BENCH_SINK=127.0.0.1:24319
export TAILGATE_BENCH_HEALTH=127.0.0.1:23133
export TAILGATE_BENCH_METRICS=127.0.0.1:28888
export TAILGATE_BENCH_EXPORT_COMPRESSION=${TAILGATE_BENCH_EXPORT_COMPRESSION:-none}

if [ "$BUILD" = 1 ]; then
  echo "== cargo build --release --bins" >&2
  cargo build --release --bins
fi
for b in tailgate tailgate-loadgen tailgate-sink; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: build with cargo build --release --bins" >&2; exit 1; }
done

# A throwaway CA and a server certificate for 127.0.0.1, for configs with TLS.
mkdir -p "$OUT/tls"
export TAILGATE_BENCH_TLS_CERT=$OUT/tls/tls.crt TAILGATE_BENCH_TLS_KEY=$OUT/tls/tls.key
if [[ " ${CONFIGS[*]} " == *tls* ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=tailgate bench CA" -keyout "$OUT/tls/ca.key" -out "$OUT/tls/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$OUT/tls/tls.key" -out "$OUT/tls/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$OUT/tls/ext.cnf"
  openssl x509 -req -in "$OUT/tls/tls.csr" -CA "$OUT/tls/ca.crt" -CAkey "$OUT/tls/ca.key" \
    -CAcreateserial -days 1 -extfile "$OUT/tls/ext.cnf" -out "$OUT/tls/tls.crt" 2>/dev/null
fi

# The configs tailgate accepts; the others' rows are skipped.
VALID_CONFIGS=()
for config in "${CONFIGS[@]}"; do
  log=$OUT/validate-$(basename "$config" .yaml).log
  if ! "$BIN/tailgate" validate --config "$config" 2>"$log"; then
    echo "tailgate does not accept $config yet (see $log): its rows are skipped" >&2
  else
    VALID_CONFIGS+=("$config")
  fi
done
CONFIG_NOTE=$(for config in "${CONFIGS[@]}"; do basename "$config"; done | paste -sd, -)

# The peer: rotel from PyPI in a virtualenv. Its wheel ships the agent binary inside the
# Python package (rotel/rotel-agent), not on PATH.
ROTEL=""
if [ "$PEER" = 1 ]; then
  VENV=$TARGET/rotel-venv
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2 || true
  fi
  if [ -x "$VENV/bin/pip" ]; then
    "$VENV/bin/pip" install -q rotel >&2 || echo "pip install rotel failed: peer skipped" >&2
    ROTEL=$("$VENV/bin/python" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))' 2>/dev/null || true)
  fi
  if [ -n "$ROTEL" ] && ! "$ROTEL" --version >/dev/null 2>&1; then
    echo "rotel-agent from PyPI does not run here: peer skipped" >&2
    ROTEL=""
  fi
fi

CLK_TCK=$(getconf CLK_TCK)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

# utime + stime in clock ticks (fields 14 and 15; strip "pid (comm) " first).
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
wait_port() {
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}
sink_spans() { jq -r '.spans' "$1" 2>/dev/null || echo 0; }
# sample_held PID FILE: until PID ends, every 0.25 s a line "VmRSS-kB spans-held bytes-held
# allocated-bytes dirty-bytes": spans and bytes held summed over the gateway's tail
# samplers (0 without one), then the allocator's bytes allocated and freed pages kept
# (otelcol_process_runtime_heap_alloc_bytes, tailgate_allocator_dirty_bytes).
sample_held() {
  : >"$2"
  while kill -0 "$1" 2>/dev/null; do
    local rss held
    rss=$(status_kb "$1" VmRSS 2>/dev/null || echo 0)
    held=$(curl -s --max-time 1 "http://$TAILGATE_BENCH_METRICS/metrics" 2>/dev/null |
      awk '/^tailgate_sampler_spans_held/ {s += $NF} /^tailgate_sampler_bytes_held/ {b += $NF}
           /^otelcol_process_runtime_heap_alloc_bytes/ {a = $NF}
           /^tailgate_allocator_dirty_bytes/ {d = $NF}
           END {printf "%d %d %d %d", s, b, a, d}' || echo "0 0 0 0")
    echo "$rss $held" >>"$2"
    sleep 0.25
  done
}

# held_stats FILE IDLE_KB: from sample_held's lines,
# "max rss charged plateau filling allocated dirty":
#   max       the most spans held at once;
#   rss       RSS above idle per held span at that sample (B);
#   charged   the sampler's charged bytes per held span at that sample (B);
#   plateau   the median of RSS above idle per held span over every sample holding at
#             least 95 % of the most (B): one sample lands anywhere on a plateau along
#             which the decision caches fill and freed pages come and go;
#   filling   the RSS added per span added while the buffer filled, from the first sample
#             holding 10 % of the most to the first holding 90 % (B): the cost of one
#             more held span, without the replica's fixed costs (decision caches, export
#             buffers, pages the allocator keeps), which the other two divide among the
#             held spans. "-" when the fill left no two such samples;
#   allocated, dirty  the allocator's bytes allocated and freed pages kept at the sample
#             of most held (MiB).
held_stats() {
  local max
  max=$(awk '$2 > max {max = $2} END {print max + 0}' "$1")
  if [ "$max" -eq 0 ]; then echo "0 0 0 - - - -"; return; fi
  local at_max plateau filling
  at_max=$(awk -v idle="$2" -v max="$max" '$2 == max {
      printf "%.0f %.0f %.1f %.1f", ($1 - idle) * 1024 / $2, $3 / $2, $4 / 1048576,
        $5 / 1048576; exit}' "$1")
  plateau=$(awk -v idle="$2" -v max="$max" '$2 >= 0.95 * max {
      printf "%.0f\n", ($1 - idle) * 1024 / $2}' "$1" | sort -n |
    awk '{v[NR] = $1} END {if (NR) printf "%.0f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
  filling=$(awk -v max="$max" '
      !low && $2 >= 0.1 * max {low = 1; r0 = $1; h0 = $2}
      !high && $2 >= 0.9 * max {high = 1; r1 = $1; h1 = $2}
      END {if (high && h1 > h0) printf "%.0f", (r1 - r0) * 1024 / (h1 - h0); else print "-"}' "$1")
  read -r rss charged allocated dirty <<<"$at_max"
  echo "$max $rss $charged $plateau $filling $allocated $dirty"
}

scenario_args() {
  local grpc=(--protocol grpc --endpoint "http://$TAILGATE_BENCH_GRPC")
  local grpc_tls=(--protocol grpc --endpoint "$TAILGATE_BENCH_GRPC" --tls-ca "$OUT/tls/ca.crt")
  case "$1" in
    grpc) echo "${grpc[@]} --rate $RATE" ;;
    grpc-max) echo "${grpc[@]}" ;;
    # Flat out, with requests of 600 and of 60 spans (the operator shape): large batches
    # from agents, and SDKs with default batch sizes.
    grpc-600) echo "${grpc[@]} --batch-spans 600" ;;
    grpc-60) echo "${grpc[@]} --batch-spans 60" ;;
    grpc-tls) echo "${grpc_tls[@]} --rate $RATE" ;;
    grpc-tls-max) echo "${grpc_tls[@]}" ;;
    grpc-gzip) echo "${grpc[@]} --gzip --rate $RATE" ;;
    http-protobuf) echo "--protocol http-protobuf --endpoint http://$TAILGATE_BENCH_HTTP/v1/traces --rate $RATE" ;;
    http-json) echo "--protocol http-json --endpoint http://$TAILGATE_BENCH_HTTP/v1/traces --rate $RATE" ;;
    http-protobuf-max) echo "--protocol http-protobuf --endpoint http://$TAILGATE_BENCH_HTTP/v1/traces" ;;
    http-json-max) echo "--protocol http-json --endpoint http://$TAILGATE_BENCH_HTTP/v1/traces" ;;
    # 30 attributes per span, 20 of them 256-byte strings: ~6 KiB per span.
    large-attributes) echo "${grpc[@]} --attributes 30 --attribute-bytes 256 --rate $((RATE / 4))" ;;
    # Every trace split in two parts 1 s apart, so each stays open in a sampler's buffer
    # for its whole decision window; the run lasts more than ten decision windows.
    many-traces) echo "${grpc[@]} --split-ratio 1 --lateness 1s --batch-spans 50 --rate $RATE" ;;
    *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

# run_one GATEWAY SCENARIO [CONFIG]: one row.
run_one() {
  local gw=$1 sc=$2 config=${3:-} tag="$1-$2"
  [ -z "$config" ] || tag="$tag-$(basename "$config" .yaml)"
  local args
  args=$(scenario_args "$sc")
  "$BIN/tailgate-sink" --listen "$TAILGATE_BENCH_SINK" --stats-file "$OUT/$tag.sink.json" \
    --max-time 10m >"$OUT/$tag.sink.out" 2>&1 &
  local sink=$!
  PIDS+=("$sink")
  wait_port 24319
  case "$gw" in
    tailgate)
      "$BIN/tailgate" --config "$config" >"$OUT/$tag.gateway.log" 2>&1 & ;;
    rotel)
      "$ROTEL" start --otlp-grpc-endpoint "$TAILGATE_BENCH_GRPC" \
        --otlp-http-endpoint "$TAILGATE_BENCH_HTTP" --exporter otlp \
        --otlp-exporter-endpoint "http://$TAILGATE_BENCH_SINK" --otlp-exporter-protocol grpc \
        --otlp-exporter-compression "$TAILGATE_BENCH_EXPORT_COMPRESSION" \
        >"$OUT/$tag.gateway.log" 2>&1 & ;;
  esac
  local pid=$!
  PIDS+=("$pid")
  wait_port 24317
  wait_port 24318
  sleep 1
  local idle_kb cpu0 cpu1 hwm_kb
  idle_kb=$(status_kb "$pid" VmRSS)
  cpu0=$(cpu_ticks "$pid")
  sample_held "$pid" "$OUT/$tag.held" &
  local sampler=$!
  # shellcheck disable=SC2086
  "$BIN/tailgate-loadgen" $args --duration "$DURATION" --seed 1 --quiet \
    --summary-json "$OUT/$tag.loadgen.json" >"$OUT/$tag.loadgen.out" 2>&1 || true
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  local held
  held=$(held_stats "$OUT/$tag.held" "$idle_kb")
  # Drain: until the sink has every accepted span (pass-through) or stops changing for
  # 3 s (sampling), at most 30 s.
  local accepted last=-1 same=0
  accepted=$(jq -r '.accepted_spans' "$OUT/$tag.loadgen.json")
  for _ in $(seq 1 60); do
    local now
    now=$(sink_spans "$OUT/$tag.sink.json")
    if [ "$now" -ge "$accepted" ]; then break; fi
    if [ "$now" = "$last" ]; then same=$((same + 1)); else same=0; fi
    if [ "$same" -ge 6 ]; then break; fi
    last=$now
    sleep 0.5
  done
  cpu1=$(cpu_ticks "$pid")
  hwm_kb=$(status_kb "$pid" VmHWM)
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  sleep 1.2 # one more stats write
  kill -TERM "$sink"; wait "$sink" 2>/dev/null || true
  local L=$OUT/$tag.loadgen.json S=$OUT/$tag.sink.json cfg=pass-through
  if [ "$gw" = tailgate ]; then cfg=$(basename "$config"); fi
  awk -v gw="$gw" -v sc="$sc" -v cfg="$cfg" \
    -v ticks=$((cpu1 - cpu0)) -v hz="$CLK_TCK" -v idle="$idle_kb" -v hwm="$hwm_kb" \
    -v acc="$accepted" -v rate="$(jq -r '.accepted_spans_per_s' "$L")" \
    -v bps="$(jq -r '.bytes / (.sent_spans + 0.000001)' "$L")" \
    -v refused="$(jq -r '.refused_spans' "$L")" -v refusals="$(jq -r '.refusals' "$L")" \
    -v p99="$(jq -r '.latency.p99_ms' "$L")" \
    -v sink="$(jq -r '.spans' "$S")" -v d50="$(jq -r '.delay_ms_p50' "$S")" \
    -v d99="$(jq -r '.delay_ms_p99' "$S")" -v held="$held" \
    'BEGIN {
       cpu = ticks / hz;
       split(held, h, " ");
       buffered = (h[1] > 0 ? sprintf("%d / %d / %d", h[1], h[2], h[3]) : "-");
       per_span = (h[1] > 0 ? sprintf("%s / %s", h[4], h[5]) : "-");
       allocator = (h[1] > 0 ? sprintf("%s / %s", h[6], h[7]) : "-");
       printf "| %s | %s | %s | %.0f | %d | %d | %.2f | %.1f | %.1f | %d / %d | %.1f | %d / %d | %.0f | %s | %s | %s |\n",
         sc, gw, cfg, rate, acc, sink, (acc > 0 ? cpu / acc * 1e6 : 0), idle / 1024, hwm / 1024,
         d50, d99, p99, refusals, refused, bps, buffered, per_span, allocator
     }' | tee -a "$RESULTS"
}

{
  echo
  echo "### $(date -u +%Y-%m-%dT%H:%MZ) duration $DURATION, rate $RATE spans/s, config $CONFIG_NOTE, export compression $TAILGATE_BENCH_EXPORT_COMPRESSION, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| scenario | gateway | config | accepted spans/s | spans accepted | spans at sink | CPU s / M spans | idle RSS MiB | peak RSS MiB | root end → sink p50 / p99 ms | loadgen p99 ms | refusals / refused spans | B/span | max held spans / RSS B per held span / charged B per held span | RSS B per held span: plateau median / while filling | allocated / dirty MiB at most held |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} | tee -a "$RESULTS"

# A TLS scenario's client and a TLS config's server go together.
is_tls() { [[ "$1" == *tls* ]]; }
for sc in $SCENARIOS; do
  for config in "${VALID_CONFIGS[@]}"; do
    if { is_tls "$sc" && is_tls "$(basename "$config")"; } ||
      { ! is_tls "$sc" && ! is_tls "$(basename "$config")"; }; then
      run_one tailgate "$sc" "$config"
    fi
  done
done
if [ -n "$ROTEL" ]; then
  for sc in $PEER_SCENARIOS; do run_one rotel "$sc"; done
fi
echo "results appended to $RESULTS" >&2
