"""A client of `ttw server` written apart from the crate, with Python's
standard library only (urllib): what a team with no Rust in it would write.

Usage:
  client.py BASE TOKEN flow QUEUE   schedules, reads, cancels and reschedules
                                    as described below, checks every answer,
                                    and prints one JSON line of what it did
  client.py BASE TOKEN bridge       reads one JSON request a line on standard
                                    input ({"method", "path", "headers",
                                    "body"}: body a string sent as is) and
                                    prints {"status", "body"} a line

TOKEN is sent as `Authorization: Bearer TOKEN` unless a bridged request
gives its own headers.
"""

import json
import sys
import urllib.error
import urllib.request

BASE, TOKEN, MODE = sys.argv[1], sys.argv[2], sys.argv[3]


def call(method, path, body=None, headers=None, raw=None):
    if headers is None:
        headers = {"Authorization": "Bearer " + TOKEN}
    data = raw.encode() if raw is not None else (
        json.dumps(body).encode() if body is not None else None)
    if data is not None:
        headers = dict(headers, **{"Content-Type": "application/json"})
    request = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return status, parsed


def expect(what, got, status):
    if got[0] != status:
        raise SystemExit(f"{what}: expected {status}, got {got}")
    return got[1]


def flow(queue):
    done = {}
    # Twenty tasks due in half a second, JSON payloads.
    done["ids"] = [
        expect("schedule", call("POST", "/v1/tasks", {"payload": {"n": n}, "delay": "500ms", "queue": queue}), 201)["id"]
        for n in range(20)
    ]
    # A key given twice (as the header the second time): one task.
    first = expect("keyed", call("POST", "/v1/tasks", {"payload": {"order": 7}, "delay": "600ms", "queue": queue,
                                                       "idempotency_key": "order-7"}), 201)
    again = call("POST", "/v1/tasks", {"payload": {"order": 7}, "queue": queue},
                 headers={"Authorization": "Bearer " + TOKEN, "Idempotency-Key": "order-7"})
    again = expect("keyed again", again, 200)
    if again != {"id": first["id"], "outcome": "existing"}:
        raise SystemExit(f"the key scheduled twice: {first} {again}")
    done["keyed"] = first["id"]
    # Scheduled far ahead, then cancelled: never delivered.
    cancel = expect("to cancel", call("POST", "/v1/tasks", {"payload": "never", "delay": "30s", "queue": queue}), 201)["id"]
    expect("cancel", call("DELETE", f"/v1/tasks/{cancel}"), 200)
    if expect("read cancelled", call("GET", f"/v1/tasks/{cancel}"), 200)["state"] != "cancelled":
        raise SystemExit("the cancelled task is not cancelled")
    expect("cancel again", call("DELETE", f"/v1/tasks/{cancel}"), 409)
    done["cancelled"] = cancel
    # An hour ahead, then brought forward by key to 300 ms from now.
    moved = expect("to move", call("POST", "/v1/tasks", {"payload": {"moved": True}, "run_at": "2999-01-01T00:00:00Z",
                                                         "queue": queue, "idempotency_key": "move-me"}), 201)["id"]
    expect("reschedule", call("POST", "/v1/keys/move-me/reschedule", {"delay": "300ms"}), 200)
    done["rescheduled"] = moved
    # A batch.
    batch = expect("batch", call("POST", "/v1/tasks/batch", {"tasks": [
        {"payload_base64": "AAEC", "delay": "400ms", "queue": queue} for _ in range(5)]}), 200)
    done["batch"] = [t["id"] for t in batch["tasks"]]
    # Read one back.
    task = expect("read", call("GET", f"/v1/tasks/{done['ids'][0]}"), 200)
    if task["payload"] != {"n": 0} or task["queue"] != queue:
        raise SystemExit(f"read back wrong: {task}")
    print(json.dumps(done), flush=True)


def bridge():
    for line in sys.stdin:
        r = json.loads(line)
        status, body = call(r["method"], r["path"], headers=r.get("headers"), raw=r.get("body"))
        print(json.dumps({"status": status, "body": body}), flush=True)


if MODE == "flow":
    flow(sys.argv[4])
else:
    bridge()
