#!/usr/bin/env bash
# Kubernetes Events and the data path: one load run of tailgate (release) with
# extensions.k8s_events pointed at the test suite's fake API server
# (tests/support/k8s_events_server.py) answering each request after 5 s ("slow"), or with
# the extension disabled ("off"). memory_limiter + tail_sampling with num_traces: 2000, so
# that early decisions (a transition the extension reports) happen all the time, + batch,
# exporting to tailgate-sink; tailgate-loadgen flat out for 20 s on 4 connections.
# Prints one line: accepted spans, spans/s, the loadgen's p99, the gateway's CPU seconds
# per million spans (utime+stime over the load), and the Events failures counted.
#
# Usage: cargo build --release --bins && ./scripts/install-test-python.sh
#        benches/k8s-events.sh off|slow [RUN]
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="$1"
WT=$PWD
BIN=${CARGO_TARGET_DIR:-target}/release
D=${CARGO_TARGET_DIR:-target}/k8s-events-bench/$MODE-${2:-1}
rm -rf "$D"; mkdir -p "$D/api"
"$WT/target/test-venv/bin/python" "$WT/tests/support/k8s_events_server.py" --workdir "$D/api" --token tok --delay 5 > "$D/api.json" &
API_PID=$!
for _ in $(seq 50); do [[ -s "$D/api.json" ]] && break; sleep 0.2; done
PORT=$(python3 -c "import json;print(json.load(open('$D/api.json'))['port'])")
echo tok > "$D/token"; echo monitoring > "$D/namespace"
ENABLED=true; [[ "$MODE" == off ]] && ENABLED=false
cat > "$D/config.yaml" <<YAML
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:14317}
processors:
  memory_limiter: {check_interval: 1s, limit_mib: 1024}
  tail_sampling:
    decision_wait: 2s
    num_traces: 2000
    policies:
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: ten-percent, type: probabilistic, probabilistic: {sampling_percentage: 10}}
  batch: {}
exporters:
  otlp/sink: {endpoint: 127.0.0.1:14400, tls: {insecure: true}, compression: none}
extensions:
  k8s_events:
    enabled: $ENABLED
    api_server: https://127.0.0.1:$PORT
    ca_file: $D/api/ca.crt
    token_file: $D/token
    namespace_file: $D/namespace
service:
  extensions: [k8s_events]
  pipelines:
    traces: {receivers: [otlp], processors: [memory_limiter, tail_sampling, batch], exporters: [otlp/sink]}
  telemetry:
    metrics: {address: 127.0.0.1:18888}
YAML
"$BIN/tailgate-sink" --listen 127.0.0.1:14400 --stats-file "$D/sink.json" --max-time 2m &
SINK_PID=$!
POD_NAME=tailgate-load-0 POD_NAMESPACE=monitoring "$BIN/tailgate" --config "$D/config.yaml" 2> "$D/tailgate.log" &
GW_PID=$!
sleep 2
cpu() { awk '{print $14 + $15}' "/proc/$GW_PID/stat"; }
CPU0=$(cpu)
"$BIN/tailgate-loadgen" --endpoint http://127.0.0.1:14317 --connections 4 --duration 20s --quiet --summary-json "$D/loadgen.json" > "$D/loadgen.txt" 2>&1 || true
CPU1=$(cpu)
sleep 3
curl -s http://127.0.0.1:18888/metrics | grep -E "^tailgate_k8s_events|^otelcol_receiver_accepted_spans|^tailgate_sampler_early_decisions_total" > "$D/metrics.txt" || true
kill -TERM "$GW_PID"; wait "$GW_PID" || true
kill "$SINK_PID" "$API_PID" 2>/dev/null || true
wait 2>/dev/null || true
ACC=$(jq -r .accepted_spans "$D/loadgen.json")
echo "$MODE accepted=$ACC spans_per_s=$(jq -r '.accepted_spans_per_s | floor' "$D/loadgen.json") p99_ms=$(jq -r '.latency.p99_ms' "$D/loadgen.json") cpu_s_per_M=$(python3 -c "print(round(($CPU1-$CPU0)/100/($ACC/1e6),2))") failed=$(grep -E '^tailgate_k8s_events_failed_total' "$D/metrics.txt" | awk '$NF>0' | tr '\n' ' ')"
