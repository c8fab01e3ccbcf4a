#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*.

Seeds are real requests and files, encoded by hand from the OTLP protos (field numbers of
opentelemetry-proto 0.33) so that no generator needs building; the fuzzer grows the corpus
from them. Run from the repository root: python3 fuzz/make_seeds.py
"""
import gzip
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(field, wire):
    return varint((field << 3) | wire)


def ld(field, body):
    if isinstance(body, str):
        body = body.encode()
    return key(field, 2) + varint(len(body)) + body


def vi(field, n):
    return key(field, 0) + varint(n)


def f64(field, n):
    return key(field, 1) + struct.pack("<Q", n)


def dbl(field, x):
    return key(field, 1) + struct.pack("<d", x)


def f32(field, n):
    return key(field, 5) + struct.pack("<I", n)


def sint(field, n):
    return vi(field, (n << 1) ^ (n >> 63))


def anyv(v):
    if isinstance(v, bool):
        return vi(2, int(v))
    if isinstance(v, int):
        return vi(3, v)
    if isinstance(v, float):
        return dbl(4, v)
    if isinstance(v, bytes):
        return ld(7, v)
    if isinstance(v, list):
        return ld(5, b"".join(ld(1, anyv(x)) for x in v))
    if isinstance(v, dict):
        return ld(6, b"".join(ld(1, kv(k, x)) for k, x in v.items()))
    return ld(1, v)


def kv(k, v):
    return ld(1, k) + ld(2, anyv(v))


def attrs(field, d):
    return b"".join(ld(field, kv(k, v)) for k, v in d.items())


def resource(d):
    return attrs(1, d)


def scope(name, version, d=None):
    return ld(1, name) + ld(2, version) + attrs(3, d or {})


TRACE = bytes(range(1, 17))
SPAN = bytes(range(0x21, 0x29))
PARENT = bytes(range(0x31, 0x39))
T0 = 1_764_547_200_000_000_000


def span(i, parent=True, events=True, links=True, status=2):
    body = ld(1, TRACE) + ld(2, SPAN[:-1] + bytes([i])) + ld(3, "rojo=00f067aa0ba902b7")
    if parent:
        body += ld(4, PARENT)
    body += ld(5, f"GET /api/{i}") + vi(6, 2) + f64(7, T0 + i) + f64(8, T0 + i + 5_000_000)
    body += attrs(9, {"http.method": "GET", "http.status_code": 200 + i, "ratio": 0.5,
                      "ok": True, "tags": ["a", 1, 2.5], "raw": b"\x00\x01",
                      "nested": {"k": "v", "deep": [{"x": 1}]}})
    if events:
        body += ld(11, f64(1, T0 + i + 1) + ld(2, "exception") +
                   attrs(3, {"exception.type": "IOError"}))
    if links:
        body += ld(13, ld(1, TRACE[::-1]) + ld(2, SPAN) + ld(3, "") + attrs(4, {"l": 1}) + f32(6, 0x101))
    body += ld(15, ld(2, "boom") + vi(3, status)) + f32(16, 0x301)
    return body


def traces_request(n_resources=1, n_spans=3, extra_unknown=False):
    out = b""
    for r in range(n_resources):
        spans = b"".join(ld(2, span(i, parent=i > 0, status=i % 3)) for i in range(n_spans))
        ss = ld(1, scope("io.opentelemetry.http", "1.2.3", {"s": "x"})) + spans + ld(3, "https://opentelemetry.io/schemas/1.26.0")
        rs = ld(1, resource({"service.name": f"checkout-{r}", "service.namespace": "shop",
                             "service.instance.id": f"pod-{r}", "k8s.pod.ip": "10.0.0.1"}))
        rs += ld(2, ss) + ld(3, "https://opentelemetry.io/schemas/1.26.0")
        if extra_unknown:
            rs += vi(99, 7) + key(100, 3) + vi(1, 1) + key(100, 4)
        out += ld(1, rs)
    return out


def number_point(t, v, exemplar=True, flags=0):
    body = attrs(7, {"method": "GET", "code": 200}) + f64(2, T0) + f64(3, T0 + t)
    body += dbl(4, v) if isinstance(v, float) else key(6, 1) + struct.pack("<q", v)
    if exemplar:
        body += ld(5, attrs(7, {"user": "u1"}) + f64(2, T0 + t) + dbl(3, 1.5) + ld(4, SPAN) + ld(5, TRACE))
    if flags:
        body += vi(8, flags)
    return body


def hist_point(t):
    counts = b"".join(struct.pack("<Q", c) for c in (1, 2, 3, 0))
    bounds = b"".join(struct.pack("<d", b) for b in (0.1, 1.0, 10.0))
    return (attrs(9, {"route": "/a"}) + f64(2, T0) + f64(3, T0 + t) + f64(4, 6) + dbl(5, 12.5)
            + ld(6, counts) + ld(7, bounds) + ld(8, f64(2, T0 + t) + dbl(3, 0.5) + ld(5, TRACE))
            + dbl(11, 0.01) + dbl(12, 9.0))


def exp_point(t, scale=3):
    buckets = ld(8, sint(1, -2) + ld(2, b"".join(varint(c) for c in (1, 0, 4))))
    neg = ld(9, sint(1, 1) + ld(2, varint(2)))
    return (attrs(1, {"route": "/b"}) + f64(2, T0) + f64(3, T0 + t) + f64(4, 8) + dbl(5, 3.25)
            + sint(6, scale) + f64(7, 1) + buckets + neg + dbl(14, 1e-9))


def summary_point(t):
    q = b"".join(ld(6, dbl(1, q) + dbl(2, v)) for q, v in ((0.5, 1.0), (0.99, 7.0), (1.0, 9.0)))
    return attrs(7, {"route": "/c"}) + f64(2, T0) + f64(3, T0 + t) + f64(4, 10) + dbl(5, 30.0) + q


def metric(name, unit, data_field, data):
    return ld(1, name) + ld(2, f"{name} help") + ld(3, unit) + ld(data_field, data) + attrs(12, {"m": "x"})


def metrics_request(temporality=2, nan_flag=False):
    ms = [
        metric("http.server.active_requests", "{request}", 5, ld(1, number_point(1, 3)) + ld(1, number_point(2, 4.5))),
        metric("http.server.requests", "1", 7, ld(1, number_point(1, 10)) + ld(1, number_point(1, 11, flags=1 if nan_flag else 0)) + vi(2, temporality) + vi(3, 1)),
        metric("queue.size", "By", 7, ld(1, number_point(3, 7.0, exemplar=False)) + vi(2, temporality)),
        metric("http.server.duration", "ms", 9, ld(1, hist_point(1)) + ld(1, hist_point(2)) + vi(2, temporality)),
        metric("rpc.latency", "s", 10, ld(1, exp_point(1)) + ld(1, exp_point(2, scale=12)) + vi(2, temporality)),
        metric("gc.pause", "s", 11, ld(1, summary_point(1))),
    ]
    sm = ld(1, scope("io.opentelemetry.runtime", "2.0", {"lib": "x"})) + b"".join(ld(2, m) for m in ms) + ld(3, "https://opentelemetry.io/schemas/1.26.0")
    rm = ld(1, resource({"service.name": "api", "service.namespace": "shop", "service.instance.id": "i-1",
                         "host.name": "h1", "k8s.namespace.name": "prod"})) + ld(2, sm)
    return ld(1, rm)


def hexid(b):
    return b.hex()


def json_traces():
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}]},
        "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
        "scopeSpans": [{
            "scope": {"name": "io.opentelemetry.http", "version": "1.2.3"},
            "spans": [{
                "traceId": hexid(TRACE), "spanId": hexid(SPAN), "parentSpanId": hexid(PARENT),
                "traceState": "rojo=00f067aa0ba902b7", "flags": 769,
                "name": "GET /api", "kind": 2,
                "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 5_000_000),
                "attributes": [
                    {"key": "http.status_code", "value": {"intValue": "200"}},
                    {"key": "ratio", "value": {"doubleValue": 0.5}},
                    {"key": "ok", "value": {"boolValue": True}},
                    {"key": "raw", "value": {"bytesValue": "AAE="}},
                    {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": 1}]}}},
                    {"key": "nested", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}},
                ],
                "droppedAttributesCount": 1,
                "events": [{"timeUnixNano": str(T0 + 1), "name": "exception",
                            "attributes": [{"key": "exception.type", "value": {"stringValue": "IOError"}}]}],
                "links": [{"traceId": hexid(TRACE[::-1]), "spanId": hexid(SPAN), "flags": 257,
                           "attributes": [{"key": "l", "value": {"intValue": 1}}]}],
                "status": {"code": 2, "message": "boom"},
            }],
        }],
    }]}


def json_metrics():
    point = {"attributes": [{"key": "method", "value": {"stringValue": "GET"}}],
             "startTimeUnixNano": str(T0), "timeUnixNano": str(T0 + 1), "asInt": "10",
             "exemplars": [{"timeUnixNano": str(T0 + 1), "asDouble": 1.5,
                            "traceId": hexid(TRACE), "spanId": hexid(SPAN)}]}
    return {"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeMetrics": [{
            "scope": {"name": "runtime", "version": "2.0"},
            "metrics": [
                {"name": "requests", "unit": "1", "sum": {"dataPoints": [point], "aggregationTemporality": 2, "isMonotonic": True}},
                {"name": "active", "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asDouble": 3.5}]}},
                {"name": "duration", "unit": "ms", "histogram": {"aggregationTemporality": 2, "dataPoints": [{
                    "timeUnixNano": str(T0), "count": "6", "sum": 12.5, "bucketCounts": ["1", "2", "3", "0"],
                    "explicitBounds": [0.1, 1.0, 10.0], "min": 0.01, "max": 9.0}]}},
                {"name": "latency", "unit": "s", "exponentialHistogram": {"aggregationTemporality": 2, "dataPoints": [{
                    "timeUnixNano": str(T0), "count": "8", "sum": 3.25, "scale": 3, "zeroCount": "1",
                    "positive": {"offset": -2, "bucketCounts": ["1", "0", "4"]},
                    "negative": {"offset": 1, "bucketCounts": ["2"]}, "zeroThreshold": 1e-9}]}},
                {"name": "gc", "summary": {"dataPoints": [{"timeUnixNano": str(T0), "count": "10", "sum": 30.0,
                    "quantileValues": [{"quantile": 0.5, "value": 1.0}, {"quantile": 0.99, "value": 7.0}]}]}},
            ],
        }],
    }]}


def segment(payloads):
    out = b"TGQSEG1\n"
    for i, p in enumerate(payloads):
        head = struct.pack("<II", len(p), i + 1)
        crc = zlib.crc32(head + p) & 0xFFFFFFFF
        out += struct.pack("<I", 0x51475452) + head + struct.pack("<I", crc) + p
    return out


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    tr = [traces_request(), traces_request(2, 2, extra_unknown=True), traces_request(1, 1),
          ld(1, ld(2, ld(2, span(0, parent=False, events=False, links=False))))]
    for i, b in enumerate(tr):
        write("otlp_traces", f"traces-{i}", b)
    write("otlp_traces", "empty-resource", ld(1, b""))
    mr = [metrics_request(), metrics_request(1, nan_flag=True)]
    for i, b in enumerate(mr):
        write("otlp_metrics", f"metrics-{i}", b)
        for flags in (0x00, 0x0F, 0x6B):
            write("remote_write", f"metrics-{i}-flags-{flags:02x}", bytes([flags]) + b)
    write("otlp_metrics", "empty", b"")
    write("otlp_json", "traces.json", json.dumps(json_traces(), indent=1))
    write("otlp_json", "metrics.json", json.dumps(json_metrics(), indent=1))
    write("otlp_json", "traces-compact.json", json.dumps(json_traces(), separators=(",", ":")))
    write("otlp_json", "empty.json", "{}")
    body = json.dumps(json_traces()).encode()
    # byte 0: limit / 97, byte 1: (inline step - 1) / 13
    write("http_decompress", "gzip", bytes([255, 3]) + gzip.compress(body))
    write("http_decompress", "zlib", bytes([255, 40]) + zlib.compress(body))
    write("http_decompress", "raw-deflate", bytes([10, 1]) + zlib.compress(body)[2:-4])
    write("http_decompress", "zstd-frame", bytes([200, 5]) + bytes.fromhex("28b52ffd2005290000") + b"hello" + b"")
    write("http_decompress", "snappy-framed", bytes([255, 2]) + b"\xff\x06\x00\x00sNaPpY" + b"\x01\x09\x00\x00" + struct.pack("<I", 0) + b"hello")
    write("http_decompress", "snappy-block", bytes([50, 0]) + varint(5) + b"\x10hello")
    write("http_decompress", "lz4-frame", bytes([50, 0]) + bytes.fromhex("04224d1864407005000080") + b"hello" + bytes(4))
    write("http_decompress", "plain", bytes([1, 1]) + body[:300])
    seg = [b"", b"x", bytes(range(256)), traces_request(1, 1)]
    write("segment", "whole", segment(seg))
    write("segment", "cut", segment(seg)[:-7])
    flipped = bytearray(segment(seg))
    flipped[30] ^= 0xFF
    write("segment", "flipped", bytes(flipped))
    write("segment", "empty", b"")
    write("segment", "header-only", b"TGQSEG1\n")


if __name__ == "__main__":
    main()
