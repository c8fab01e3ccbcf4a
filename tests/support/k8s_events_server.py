"""A fake Kubernetes API server for the events.k8s.io/v1 endpoints tailgate calls.

Serves, over HTTPS with a certificate made at start (openssl CLI: a CA and a leaf for
127.0.0.1 signed by it):

  POST  /apis/events.k8s.io/v1/namespaces/{ns}/events         create an Event
  PATCH /apis/events.k8s.io/v1/namespaces/{ns}/events/{name}  JSON merge patch (RFC 7386)

Every object it receives (a POSTed body, or a stored Event with a patch applied) is
validated against the official OpenAPI schema of Kubernetes 1.30 with kubernetes-validate
(strict: no unknown fields), and against the rules the API server's own validation adds
for events.k8s.io/v1 (pkg/apis/core/validation/events.go): type Normal or Warning;
reportingController, reportingInstance, action and reason set, at most 128 characters;
note at most 1 KiB; eventTime set, a MicroTime; regarding in the Event's namespace;
series.count at least 2 with lastObservedTime; no deprecated core/v1 fields. tailgate's
conventions are checked too: reason and action PascalCase. A request that fails is
answered 422 with a Status, and recorded with its errors.

A plain-HTTP state port on loopback answers GET /state with every request seen and the
stored Events, for the test to read:
  {"requests": [{"method", "path", "status", "errors": [..], "body": ..}], "events": {name: obj}}

Usage: python k8s_events_server.py --workdir DIR --token TOKEN [--delay SECONDS]
Prints one JSON line on stdout when ready: {"port": N, "state_port": M, "ca": "DIR/ca.crt"}.
"""

import argparse
import copy
import json
import re
import ssl
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes_validate

KUBE_VERSION = "1.30"
PREFIX = "/apis/events.k8s.io/v1/namespaces/"
MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
PASCAL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
DEPRECATED = ["deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount"]

LOCK = threading.Lock()
REQUESTS = []
EVENTS = {}


def validate(event, namespace):
    """Every problem with `event` as the API server would see it, as strings."""
    errors = []
    try:
        kubernetes_validate.validate(event, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        errors.append("schema: " + str(error).split("\n", 1)[0])
    except Exception as error:  # noqa: BLE001 - any failure is a failed validation
        errors.append(f"schema: {type(error).__name__}: {error}")
    if event.get("apiVersion") != "events.k8s.io/v1" or event.get("kind") != "Event":
        errors.append("apiVersion/kind must be events.k8s.io/v1 Event")
    meta = event.get("metadata") or {}
    name = meta.get("name", "")
    if not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        errors.append(f"metadata.name {name!r} is not a DNS subdomain")
    if meta.get("namespace") != namespace:
        errors.append(f"metadata.namespace {meta.get('namespace')!r} does not match the URL's {namespace!r}")
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(f"type {event.get('type')!r} is not Normal or Warning")
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        value = event.get(field) or ""
        if not value:
            errors.append(f"{field} is required")
        elif len(value) > 128:
            errors.append(f"{field} is longer than 128 characters")
    controller = event.get("reportingController") or ""
    if controller and not QUALIFIED_NAME.match(controller):
        errors.append(f"reportingController {controller!r} is not a qualified name")
    for field in ("action", "reason"):
        value = event.get(field) or ""
        if value and not PASCAL.match(value):
            errors.append(f"{field} {value!r} is not PascalCase")
    note = event.get("note") or ""
    if len(note.encode("utf-8")) > 1024:
        errors.append(f"note is {len(note.encode('utf-8'))} bytes, more than 1 KiB")
    event_time = event.get("eventTime")
    if not event_time or not MICRO_TIME.match(event_time):
        errors.append(f"eventTime {event_time!r} is not a MicroTime")
    regarding = event.get("regarding") or {}
    if regarding.get("namespace") and regarding.get("namespace") != meta.get("namespace"):
        errors.append("regarding.namespace does not match the Event's namespace")
    if regarding.get("kind") != "Pod" or regarding.get("apiVersion") != "v1" or not regarding.get("name"):
        errors.append(f"regarding {regarding!r} is not a Pod reference")
    series = event.get("series")
    if series is not None:
        if not isinstance(series.get("count"), int) or series["count"] < 2:
            errors.append(f"series.count {series.get('count')!r} must be at least 2")
        if not MICRO_TIME.match(series.get("lastObservedTime") or ""):
            errors.append("series.lastObservedTime is not a MicroTime")
    for field in DEPRECATED:
        if field in event:
            errors.append(f"{field} must not be set")
    return errors


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code}


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    token = ""
    delay = 0.0

    def log_message(self, *args):
        pass

    def answer(self, code, body, record):
        data = json.dumps(body).encode()
        record["status"] = code
        with LOCK:
            REQUESTS.append(record)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length)

    def route(self, method):
        raw = self.read_body()
        record = {"method": method, "path": self.path, "errors": [], "body": None}
        if self.delay:
            time.sleep(self.delay)
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            record["errors"].append("missing or wrong bearer token")
            return self.answer(401, status(401, "Unauthorized", "Unauthorized"), record)
        try:
            body = json.loads(raw)
        except ValueError as error:
            record["errors"].append(f"body is not JSON: {error}")
            return self.answer(400, status(400, "BadRequest", str(error)), record)
        record["body"] = body
        if not self.path.startswith(PREFIX):
            record["errors"].append("unknown path")
            return self.answer(404, status(404, "NotFound", "unknown path"), record)
        parts = self.path[len(PREFIX):].split("/")
        namespace = parts[0]
        if method == "POST" and len(parts) == 2 and parts[1] == "events":
            if self.headers.get("Content-Type") != "application/json":
                record["errors"].append(f"content type {self.headers.get('Content-Type')!r}")
                return self.answer(415, status(415, "UnsupportedMediaType", "json only"), record)
            errors = validate(body, namespace)
            if errors:
                record["errors"].extend(errors)
                return self.answer(422, status(422, "Invalid", "; ".join(errors)), record)
            name = body["metadata"]["name"]
            with LOCK:
                if name in EVENTS:
                    exists = True
                else:
                    exists = False
                    stored = copy.deepcopy(body)
                    stored["metadata"].update({"uid": str(uuid.uuid4()), "resourceVersion": "1",
                                               "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                    EVENTS[name] = stored
            if exists:
                return self.answer(409, status(409, "AlreadyExists", f"events {name!r} already exists"), record)
            return self.answer(201, stored, record)
        if method == "PATCH" and len(parts) == 3 and parts[1] == "events":
            name = parts[2]
            content_type = self.headers.get("Content-Type")
            if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                record["errors"].append(f"patch content type {content_type!r}")
                return self.answer(415, status(415, "UnsupportedMediaType", "merge patch only"), record)
            with LOCK:
                current = copy.deepcopy(EVENTS.get(name))
            if current is None:
                return self.answer(404, status(404, "NotFound", f"events {name!r} not found"), record)
            patched = merge_patch(current, body)
            # The server-set metadata is not part of what a client may send.
            check = copy.deepcopy(patched)
            for field in ("uid", "resourceVersion", "creationTimestamp"):
                check["metadata"].pop(field, None)
            errors = validate(check, namespace)
            immutable = [f for f in ("eventTime", "reason", "action", "type", "regarding",
                                     "reportingController", "reportingInstance", "note")
                         if patched.get(f) != current.get(f)]
            errors.extend(f"{field} changed by a patch" for field in immutable)
            if errors:
                record["errors"].extend(errors)
                return self.answer(422, status(422, "Invalid", "; ".join(errors)), record)
            patched["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            with LOCK:
                EVENTS[name] = patched
            return self.answer(200, patched, record)
        record["errors"].append("unknown method or path")
        return self.answer(405, status(405, "MethodNotAllowed", "not served"), record)

    def do_POST(self):
        self.route("POST")

    def do_PATCH(self):
        self.route("PATCH")

    def do_PUT(self):
        self.route("PUT")


class State(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        with LOCK:
            data = json.dumps({"requests": REQUESTS, "events": EVENTS}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_certificates(workdir):
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{workdir}/ca.key", "-out", f"{workdir}/ca.crt", "-subj", "/CN=fake-kubernetes-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{workdir}/server.key",
        "-out", f"{workdir}/server.csr", "-subj", "/CN=127.0.0.1")
    with open(f"{workdir}/ext.cnf", "w") as ext:
        ext.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                  "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", f"{workdir}/server.csr", "-CA", f"{workdir}/ca.crt",
        "-CAkey", f"{workdir}/ca.key", "-CAcreateserial", "-days", "2",
        "-out", f"{workdir}/server.crt", "-extfile", f"{workdir}/ext.cnf")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    make_certificates(args.workdir)
    Api.token = args.token
    Api.delay = args.delay
    api = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    api.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(f"{args.workdir}/server.crt", f"{args.workdir}/server.key")
    api.socket = context.wrap_socket(api.socket, server_side=True)
    state = ThreadingHTTPServer(("127.0.0.1", 0), State)
    state.daemon_threads = True
    threading.Thread(target=state.serve_forever, daemon=True).start()
    print(json.dumps({"port": api.server_address[1], "state_port": state.server_address[1],
                      "ca": f"{args.workdir}/ca.crt"}), flush=True)
    api.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
