#!/usr/bin/env python3
"""Instructions per iteration of each criterion bench path, counted by callgrind.

Wall-clock medians on a shared 2-vCPU VM move by 10 % and more between two runs of the
same binary, which hides a 5 % regression. Instruction counts do not move: this runs each
benchmark id of a criterion bench binary alone under `valgrind --tool=callgrind` (criterion
on its shortest settings: the timing it prints is meaningless under valgrind) and reads,
from the call graph, the inclusive instructions of the path's entry function(s) per
iteration. It counts instructions, not cycles: cache misses, branch mispredictions and
allocator page faults are invisible to it, so it complements the timed runs and the
whole-process load bench; it does not replace them.

Usage:
    benches/instructions.py <bench binary> [<out dir>] [<id regex>]

With an id regex, only the benchmark ids it matches (anywhere in the id) are run.

The bench binary is the one `cargo bench --no-run --bench pipeline_paths` (or
`otlp_wire`) builds, e.g. `target/release/deps/pipeline_paths-<hash>`. Prints one line per
measured id: `id<TAB>instructions per iteration<TAB>iterations counted`. Ids whose code is
not tailgate's (prost's decoder, the bench's own floor) are listed in SKIPPED.
"""

import re
import subprocess
import sys
from pathlib import Path

# Per benchmark id (the part after the group name): the functions whose inclusive cost
# makes one iteration, and the function called exactly once per iteration (the counter).
# Names are callgrind's demangled Rust paths, matched as regexes at the end of the name.
PATHS = {
    "spanmetrics_record": (
        [r"<tailgate::connector::spanmetrics::SpanMetricsConnector as .*Consumer<.*TraceBatch>>::consume"],
        r"<tailgate::connector::spanmetrics::SpanMetricsConnector as .*Consumer<.*TraceBatch>>::consume",
    ),
    "spanmetrics_record_views": (
        [r"<tailgate::connector::spanmetrics::SpanMetricsConnector as .*Consumer<.*TraceBatch>>::consume"],
        r"<tailgate::connector::spanmetrics::SpanMetricsConnector as .*Consumer<.*TraceBatch>>::consume",
    ),
    "count_spans": (["tailgate::otlp::wire::count_spans"], "tailgate::otlp::wire::count_spans"),
    "parse_traces_request": (
        ["tailgate::otlp::wire::parse_traces_request"],
        "tailgate::otlp::wire::parse_traces_request",
    ),
    "json_to_protobuf": (
        [r"tailgate::otlp::json::traces_json_to_protobuf"],
        r"tailgate::otlp::json::traces_json_to_protobuf",
    ),
    "parse_and_reframe_all": (
        [
            "tailgate::otlp::wire::parse_traces_request",
            r"TraceRequestWriter::push_view",
            r"TraceRequestWriter::finish",
        ],
        r"TraceRequestWriter::finish",
    ),
    "parse_and_reframe": (
        [
            "tailgate::otlp::wire::parse_traces_request",
            r"TraceRequestWriter::push_view",
            r"TraceRequestWriter::finish",
        ],
        r"TraceRequestWriter::finish",
    ),
    "split_batch_100": ([r"tailgate::otlp::\S*split_batch"], r"tailgate::otlp::\S*split_batch"),
    "sampler_insert": ([r"SamplerIngest::ingest"], r"SamplerIngest::ingest"),
    "sampler_decide": ([r"Runtime::block_on"], r"Runtime::block_on"),
    "translate": (
        [r"remote_write::translate::translate"],
        r"remote_write::translate::translate",
    ),
    "translate_encode_v1": (
        [r"pipeline_paths::translate_encode_v1"],
        r"pipeline_paths::translate_encode_v1",
    ),
}
SKIPPED = {"prost_decode", "floor_scan_copy"}
# The benches' set-up (building the requests, checking them once) calls some entry
# functions outside the timed loop; calls from these callers are not iterations.
SETUP_CALLERS = re.compile(r"^(pipeline_paths|otlp_wire)::(main|request|bench)$")


def bench_ids(binary):
    listing = subprocess.run(
        [binary, "--bench", "--list"], capture_output=True, text=True, check=True
    ).stdout
    return [line.split(": benchmark")[0] for line in listing.splitlines() if ": benchmark" in line]


def path_of(bench_id):
    """The PATHS key of an id such as `operator_102_spans/json_to_protobuf/104235`."""
    parts = bench_id.split("/")
    return parts[1] if len(parts) > 1 else parts[0]


def call_costs(callgrind_out):
    """{callee name: [calls, inclusive Ir]} over every call edge whose caller is another
    function (a recursive call is already inside its caller's inclusive cost) and not the
    bench's set-up."""
    names = {}

    def resolve(token):
        match = re.match(r"\((\d+)\)(?:\s+(.*))?", token)
        if not match:
            return token
        if match.group(2):
            names[match.group(1)] = match.group(2)
        return names.get(match.group(1), "?")

    edges = {}
    caller = callee = None
    pending = None
    with open(callgrind_out) as lines:
        for line in lines:
            if line.startswith("fn="):
                caller = resolve(line[3:].strip())
            elif line.startswith("cfn="):
                callee = resolve(line[4:].strip())
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif pending is not None:
                fields = line.split()
                if callee != caller and not SETUP_CALLERS.search(caller) and len(fields) > 1:
                    edge = edges.setdefault(callee, [0, 0])
                    edge[0] += pending
                    edge[1] += int(fields[1])
                pending = None
    return edges


def per_iteration(edges, entries, counter):
    def matching(pattern):
        rx = re.compile(pattern + r"$")
        return [name for name in edges if rx.search(name)]

    iterations = sum(edges[name][0] for name in matching(counter))
    # A function matched by two entry patterns is counted once.
    names = {name for pattern in entries for name in matching(pattern)}
    # Entries nested inside another entry (parse inside finish, say) are not double counted:
    # criterion's closure calls each entry directly, so only top-level calls are summed.
    cost = sum(edges[name][1] for name in names)
    return cost, iterations


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    out_dir = Path(sys.argv[2] if len(sys.argv) > 2 else "target/instructions")
    only = re.compile(sys.argv[3]) if len(sys.argv) > 3 else None
    out_dir.mkdir(parents=True, exist_ok=True)
    for bench_id in bench_ids(binary):
        if only and not only.search(bench_id):
            continue
        path = path_of(bench_id)
        if path in SKIPPED:
            continue
        if path not in PATHS:
            print(f"{bench_id}\tno entry function known: add it to PATHS", file=sys.stderr)
            continue
        out = out_dir / (bench_id.replace("/", "__") + ".callgrind")
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                binary, "--bench", "--exact", bench_id,
                "--warm-up-time", "0.01", "--measurement-time", "0.1",
                "--sample-size", "10", "--nresamples", "1", "--noplot",
            ],
            capture_output=True, check=True,
        )
        entries, counter = PATHS[path]
        cost, iterations = per_iteration(call_costs(out), entries, counter)
        if iterations == 0:
            print(f"{bench_id}\tentry function not found (inlined or renamed?)", file=sys.stderr)
            continue
        print(f"{bench_id}\t{cost / iterations:.0f}\t{iterations}", flush=True)


if __name__ == "__main__":
    main()
