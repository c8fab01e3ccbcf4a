"""Sends spans with the OpenTelemetry Python SDK over OTLP/HTTP protobuf and reports how
every HTTP attempt ended.

Run by tests/python_sdk.rs from the test venv (scripts/install-test-python.sh):

    python3 send_spans.py ENDPOINT SPANS

The exporter (opentelemetry-exporter-otlp-proto-http) sends through `requests`, which
writes the whole body before it reads the answer. A `requests.Session` that records each
attempt tells an answered refusal (a status) from a connection error (an exception), which
the exporter would otherwise retry silently. Prints one JSON object on the last line of
stdout: the statuses seen, the connection errors, the exporter's warnings and errors, and
whether every export succeeded. Exits 0 when the spans were handed over, whatever the
attempts were: the test judges the report.
"""

import json
import logging
import sys

import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

# Each span carries this much padding, so that every export request is far larger than
# the room the test leaves in the gateway's memory budget.
PADDING = "p" * 1024
BATCH = 50


class RecordingSession(requests.Session):
    """Records the status of every answered attempt and every attempt that failed."""

    def __init__(self):
        super().__init__()
        self.statuses = []
        self.errors = []

    def request(self, method, url, *args, **kwargs):
        try:
            response = super().request(method, url, *args, **kwargs)
        except Exception as error:  # recorded, then handled by the exporter as usual
            self.errors.append(f"{type(error).__name__}: {error}")
            raise
        self.statuses.append(response.status_code)
        return response


class RecordingExporter(SpanExporter):
    """Wraps the OTLP exporter to keep the result of every export call."""

    def __init__(self, inner):
        self.inner = inner
        self.results = []

    def export(self, spans):
        result = self.inner.export(spans)
        self.results.append(result == SpanExportResult.SUCCESS)
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return self.inner.force_flush(timeout_millis)


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


def main():
    endpoint, count = sys.argv[1], int(sys.argv[2])
    logs = Collect()
    logging.getLogger("opentelemetry").addHandler(logs)

    session = RecordingSession()
    # 30 s instead of the default 10 s: the test holds the gateway under pressure for a
    # few seconds, and each refusal asks for a one-second pause.
    exporter = RecordingExporter(OTLPSpanExporter(endpoint=endpoint, session=session, timeout=30))
    provider = TracerProvider(resource=Resource.create({"service.name": "python-sdk-test"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=count + 1,
            max_export_batch_size=BATCH,
            schedule_delay_millis=50,
            export_timeout_millis=60_000,
        )
    )
    tracer = provider.get_tracer("python-sdk-test")
    for seq in range(count):
        with tracer.start_as_current_span("work") as span:
            span.set_attribute("seq", seq)
            span.set_attribute("padding", PADDING)
    flushed = provider.force_flush(timeout_millis=120_000)
    provider.shutdown()
    report = {
        "flushed": flushed,
        "statuses": session.statuses,
        "connection_errors": session.errors,
        "exports": exporter.results,
        "logs": logs.messages,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
