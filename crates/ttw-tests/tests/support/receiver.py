"""A webhook receiver written apart from the crate, with Python's standard
library only: it checks each request's Standard Webhooks signature with
`hmac` and prints one JSON line per request on standard output.

Usage: receiver.py PORT SECRET [WORKERS]   (PORT 0 picks a free port)

With WORKERS, requests are read by a pool of that many threads, as a
server with a fixed number of workers does: the connections beyond it wait
in the accept queue, their requests unread, until a worker is free; each
answer closes its connection.

It prints `LISTENING <port>` first. The payload tells it how to answer,
as `;`-separated `name=value` pairs (anything else is answered 200):
  status=N        answer N ...
  times=K         ... to the first K attempts (default: every attempt)
  retry_after=S   with a Retry-After of S seconds
  sleep_ms=M      sleep M ms before answering the first K attempts
  answer=wide     with a body of 100 KB of 4-byte characters (after one byte)
"""

import base64
import hashlib
import hmac
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
SECRET = sys.argv[2]
KEY = base64.b64decode(SECRET[len("whsec_"):])
# One line at a time on standard output, from any thread.
PRINT = threading.Lock()


def verify(msg_id, timestamp, body, signature):
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest()).decode()
    for part in signature.split(" "):
        version, _, sig = part.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return True
    return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        arrived = time.time() * 1000.0
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        h = self.headers
        record = {
            "arrived_ms": arrived,
            "path": self.path,
            "method": self.command,
            "traceparent": h.get("traceparent"),
            "tracestate": h.get("tracestate"),
            "tenant": h.get("x-tenant"),
            "webhook_id": h.get("webhook-id"),
            "timestamp": h.get("webhook-timestamp"),
            "verified": verify(h.get("webhook-id", ""), h.get("webhook-timestamp", ""), body,
                               h.get("webhook-signature", "")),
            "fresh": abs(time.time() - int(h.get("webhook-timestamp", "0"))) < 300,
            "task": int(h.get("ttw-task-id", "0")),
            "attempt": int(h.get("ttw-attempt", "0")),
            "queue": h.get("ttw-queue"),
            "run_at_ms": int(h.get("ttw-run-at", "0")),
            "key": h.get("ttw-idempotency-key"),
            "content_type": h.get("content-type"),
            "body": body.decode("utf-8", "replace"),
        }
        plan = {}
        for pair in record["body"].split(";"):
            name, eq, value = pair.partition("=")
            if eq:
                plan[name] = value
        status = 200
        extra = {}
        sleep = 0.0
        if "times" not in plan or record["attempt"] <= int(plan["times"]):
            status = int(plan.get("status", "200"))
            if "retry_after" in plan:
                extra["Retry-After"] = plan["retry_after"]
            sleep = int(plan.get("sleep_ms", "0")) / 1000.0
        record["status"] = status
        # Printed when it arrives, before any sleep.
        with PRINT:
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()
        time.sleep(sleep)
        answer = b"ok" if status < 300 else ("refused with %d by the receiver" % status).encode()
        if plan.get("answer") == "wide":
            # One byte first: the characters end off every bound's boundary.
            answer = ("x" + "\U0001F600" * 25000).encode()
        self.send_response(status)
        if getattr(self.server, "close_each", False):
            self.send_header("connection", "close")
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_PUT = do_POST

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up (its timeout) closed the connection: not
        # the receiver's error.
        pass


class Pooled(Server):
    request_queue_size = 1024
    # A worker serves one request per connection: one held open between
    # requests would keep its worker from every other connection.
    close_each = True

    def __init__(self, address, handler, workers):
        super().__init__(address, handler)
        self.pool = ThreadPoolExecutor(workers)

    def process_request(self, request, client_address):
        self.pool.submit(self.process_request_thread, request, client_address)


if len(sys.argv) > 3:
    server = Pooled(("127.0.0.1", PORT), Handler, int(sys.argv[3]))
else:
    server = Server(("127.0.0.1", PORT), Handler)
print("LISTENING %d" % server.server_address[1], flush=True)
server.serve_forever()
