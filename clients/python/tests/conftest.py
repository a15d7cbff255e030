"""A real `ttw server` for the client's tests: the binary the workspace
built (or `TTW_BIN`), on a fresh SQLite file, with a webhook queue whose
deliveries a receiver in this process checks, a queue with no target
(its tasks stay scheduled), and a pull queue (`work`) for the workers."""

import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
sys.path.insert(0, str(HERE.parent / "src"))

TOKEN = "client-test-token-0123456789"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def ttw_binary():
    given = os.environ.get("TTW_BIN")
    if given:
        return given
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    path = pathlib.Path(target) / "debug" / "ttw"
    if not path.exists():
        pytest.fail(f"no ttw binary at {path}: run `cargo build -p ttw` or set TTW_BIN")
    return str(path)


class Receiver:
    """Deliveries received: (headers, body) in the order they came; each
    delivery's method and path are in its headers as ``:method`` and
    ``:path``."""

    def __init__(self):
        self.received = queue.Queue()
        self.flaky = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                headers.update({":method": self.command, ":path": self.path})
                outer.received.put((headers, body))
                # A flaky endpoint: busy the first time a path is called,
                # then fine.
                if self.path.startswith("/dest/flaky/"):
                    first = self.path not in outer.flaky
                    outer.flaky.add(self.path)
                    answer = b"busy, try later" if first else b"accepted"
                    self.send_response(503 if first else 200)
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                # A refusing endpoint: gone for good (the task is dead).
                if self.path.startswith("/dest/refuse/"):
                    answer = b"no such order"
                    self.send_response(410)
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            do_PUT = do_POST

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.url = self.base + "/hook"


class Server:
    def __init__(self, receiver):
        self.dir = tempfile.mkdtemp(prefix="ttw-py-client-")
        config = pathlib.Path(self.dir) / "ttw.toml"
        config.write_text(
            f'''listen = "127.0.0.1:0"
database = "{self.dir}/tasks.db"

[[queues]]
name = "hooks"
webhook = {{ url = "{receiver.url}", secret_env = "TTW_HOOK_SECRET" }}

[[queues]]
name = "later"

[[queues]]
name = "work"
pull = true

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read", "admin", "consume"]
destinations = ["{receiver.base}/dest/"]
'''
        )
        env = dict(os.environ, TTW_TOKEN_APP=TOKEN, TTW_HOOK_SECRET=SECRET)
        env.pop("DATABASE_URL", None)
        self.process = subprocess.Popen(
            [ttw_binary(), "server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        first = self.process.stdout.readline().strip()
        prefix = "ttw server: listening on "
        assert first.startswith(prefix), f"unexpected first line: {first!r}"
        self.url = first[len(prefix):].rstrip("/")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@pytest.fixture(scope="session")
def receiver():
    return Receiver()


@pytest.fixture(scope="session")
def server(receiver):
    s = Server(receiver)
    yield s
    s.stop()


@pytest.fixture
def client(server):
    from ttw_client import Client

    return Client(server.url, TOKEN)


@pytest.fixture(scope="session")
def document():
    out = subprocess.run([ttw_binary(), "server", "--openapi"], check=True, capture_output=True)
    return json.loads(out.stdout)
