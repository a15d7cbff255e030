"""The client against a real `ttw server`: every call the client has, its
typed errors, its retries through a stopped server, and the signature of a
real delivery; and its generated types held equal to the server's document."""

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from conftest import HERE, SECRET, TOKEN, ttw_binary
from ttw_client import CODES, Client, ConnectionFailed, InvalidSignature, errors, new_task, verify_webhook


def every_thread_stopped(pid):
    """A stop signal reaches each thread of a process in its own time: waits
    until every thread of `pid` is stopped."""
    for _ in range(500):
        tasks = os.listdir(f"/proc/{pid}/task")
        states = [open(f"/proc/{pid}/task/{t}/stat").read().rsplit(") ", 1)[1][0] for t in tasks]
        if all(s in "Tt" for s in states):
            return
        time.sleep(0.002)
    raise AssertionError("the server did not stop")


def scheduled(client, queue="later"):
    return client.counts()["queues"].get(queue, {}).get("scheduled", 0)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_generated_types_are_the_server_s_document(document):
    """`_generated.py` is what generate.py makes of the running binary's
    document: a code, an enum or a field the server changed fails here."""
    out = subprocess.run([ttw_binary(), "server", "--openapi"], check=True, capture_output=True)
    check = subprocess.run(
        [sys.executable, str(HERE.parent / "generate.py"), "--check"], input=out.stdout, capture_output=True
    )
    assert check.returncode == 0, check.stderr.decode()
    assert list(CODES) == document["components"]["schemas"]["Code"]["enum"]
    for code in CODES:
        assert issubclass(errors.BY_CODE[code], errors.ApiError)


def test_one_task_scheduled_read_moved_and_cancelled_by_id_and_by_key(client):
    key = unique("order")
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    made = client.schedule({"order": 42}, run_at=at, queue="later", idempotency_key=key, priority=2)
    assert made["outcome"] == "created"
    again = client.schedule({"order": 42}, run_at=at, queue="later", idempotency_key=key)
    assert again == {"id": made["id"], "outcome": "existing"}

    task = client.get(made["id"])
    assert (task["state"], task["queue"], task["priority"], task["idempotency_key"]) == ("scheduled", "later", 2, key)
    assert task["payload"] == {"order": 42}
    assert abs(datetime.fromisoformat(task["run_at"].replace("Z", "+00:00")) - at) < timedelta(milliseconds=1)
    assert client.get_by_key(key)["id"] == made["id"]

    moved = client.reschedule(made["id"], delay="2h")
    assert moved["rescheduled"] is True
    later = datetime.fromisoformat(client.get(made["id"])["run_at"].replace("Z", "+00:00"))
    assert later - datetime.now(timezone.utc) > timedelta(minutes=119)
    client.reschedule_by_key(key, run_at=at)
    assert client.cancel_by_key(key)["cancelled"] is True
    assert client.get(made["id"])["state"] == "cancelled"
    with pytest.raises(errors.NotScheduled):
        client.cancel(made["id"])

    raw = client.schedule(payload_bytes=b"\x00\xff", delay=3600, queue="later")
    assert base64.b64decode(client.get(raw["id"])["payload_base64"]) == b"\x00\xff"
    assert client.cancel(raw["id"])["cancelled"] is True


def test_a_batch_is_listed_back_page_by_page(client):
    before = scheduled(client)
    batch = [new_task({"n": n}, delay="1h", queue="later", partition_key="tenant-a") for n in range(250)]
    answers = client.schedule_many(batch)["tasks"]
    assert len(answers) == 250 and all(a["outcome"] == "created" for a in answers)
    assert scheduled(client) == before + 250
    pages = client.page(state="scheduled", queue="later", limit=100)
    assert len(pages["tasks"]) == 100 and pages["next_cursor"]
    ids = [t["id"] for t in client.tasks(state="scheduled", queue="later", limit=100)]
    assert set(a["id"] for a in answers) <= set(ids)
    assert ids == sorted(ids)


def test_tasks_page_in_due_order_by_their_cursor(client):
    key = f"due-{uuid.uuid4()}"
    batch = [new_task({"n": n}, delay=delay, queue="later", partition_key=key) for n, delay in enumerate(["3h", "1h", "2h"])]
    ids = [t["id"] for t in client.schedule_many(batch)["tasks"]]
    first = client.page(queue="later", partition_key=key, state="scheduled", order="due", limit=2)
    assert [t["id"] for t in first["tasks"]] == [ids[1], ids[2]]
    rest = client.page(queue="later", partition_key=key, state="scheduled", order="due", limit=2, cursor=first["next_cursor"])
    assert [t["id"] for t in rest["tasks"]] == [ids[0]]
    latest = [t["id"] for t in client.tasks(queue="later", partition_key=key, state="scheduled", order="due_desc", limit=1)]
    assert latest == [ids[0], ids[2], ids[1]]
    with pytest.raises(errors.InvalidCursor):
        client.page(queue="later", order="due", cursor=str(ids[0]))


def test_a_filter_chooses_a_page_a_count_and_a_bulk_cancel_alike(client):
    key = f"tenant-{uuid.uuid4()}"
    batch = [new_task({"n": n}, delay="2h", queue="later", partition_key=key) for n in range(4)]
    ids = [t["id"] for t in client.schedule_many(batch)["tasks"]]
    newest = client.page(queue="later", partition_key=key, order="desc")
    assert [t["id"] for t in newest["tasks"]] == ids[::-1]
    created = client.page(queue="later", partition_key=key, created_from=datetime.now(timezone.utc) - timedelta(minutes=5))
    assert len(created["tasks"]) == 4
    assert client.cancel_matching(queue="later", partition_key=key, dry_run=True)["cancelled"] == 4
    assert len(client.page(queue="later", partition_key=key, state="scheduled")["tasks"]) == 4
    assert client.cancel_matching(queue="later", partition_key=key, limit=3) == {"cancelled": 3, "dry_run": False}
    assert client.redrive(state="cancelled", queue="later", partition_key=key, dry_run=True)["redriven"] == 3
    assert client.redrive(state="cancelled", queue="later", partition_key=key)["redriven"] == 3
    assert len(client.page(queue="later", partition_key=key, state="scheduled")["tasks"]) == 4
    with pytest.raises(errors.NotDead):
        client.redrive_task(ids[0])
    with pytest.raises(TypeError):
        client.page(tenant=key)
    assert isinstance(client.nodes()["nodes"], list)
    assert isinstance(client.stats()["points"], list)


def test_refusals_are_typed_by_code(client, server):
    with pytest.raises(errors.NotFound) as missing:
        client.get(999_999_999)
    assert missing.value.status == 404 and missing.value.code == "not_found"
    with pytest.raises(errors.UnknownQueue):
        client.schedule("x", queue="no-such-queue")
    with pytest.raises(errors.InvalidDelay):
        client.schedule("x", delay="soonish", queue="later")
    with pytest.raises(errors.InvalidTime):
        client.schedule("x", run_at="tomorrow", queue="later")
    with pytest.raises(errors.Unauthorized):
        Client(server.url, "wrong-token-0123456789").counts()
    with pytest.raises(ValueError):
        client.schedule("x", delay="1s", run_at=datetime.now(timezone.utc))
    with pytest.raises(ValueError):
        client.schedule("x", run_at=datetime.now())
    with pytest.raises(ConnectionFailed):
        Client("http://127.0.0.1:1", TOKEN, retries=1, backoff=0.01).counts()


def test_recurring_schedules_and_queues(client):
    name = unique("nightly")
    put = client.put_recurring(name, cron="0 3 * * *", time_zone="Europe/Paris", payload={"job": "report"}, queue="later")
    assert put["outcome"] == "created"
    assert client.put_recurring(name, cron="0 3 * * *", time_zone="Europe/Paris", payload={"job": "report"}, queue="later")["outcome"] == "unchanged"
    listed = {r["name"]: r for r in client.recurring()}
    assert listed[name]["cron"] == "0 3 * * *" and listed[name]["paused"] is False
    assert client.pause_recurring(name)["paused"] is True
    assert client.resume_recurring(name)["resumed"] is True
    assert client.delete_recurring(name)["deleted"] is True
    assert name not in {r["name"] for r in client.recurring()}

    assert client.pause_queue("later")["paused"] is True
    assert client.queue("later")["paused"] is True
    assert client.resume_queue("later")["paused"] is False
    limited = client.set_limits("later", concurrency=3, per_key_concurrency=1, rate={"count": 10, "per": "1s"})
    assert (limited["concurrency"], limited["per_key_concurrency"]) == (3, 1)
    assert client.set_retry("later", max_attempts=4, backoff={"base": "1s", "max": "1m"})["max_attempts"] == 4
    assert "later" in {q["queue"] for q in client.queues()}


def test_a_delivery_verifies_with_the_queue_s_secret(client, receiver):
    while not receiver.received.empty():
        receiver.received.get_nowait()
    made = client.schedule({"hello": "webhook"}, queue="hooks")
    deadline = time.time() + 30
    while True:
        headers, body = receiver.received.get(timeout=max(0.1, deadline - time.time()))
        if headers.get("ttw-task-id") == str(made["id"]):
            break
    assert verify_webhook(SECRET, headers, body) == headers["webhook-id"]
    with pytest.raises(InvalidSignature):
        verify_webhook(SECRET, headers, body + b" ")
    with pytest.raises(InvalidSignature):
        verify_webhook(SECRET, headers, body, now=time.time() + 3600)
    wrong = "whsec_" + base64.b64encode(b"another secret, 24 bytes").decode()
    with pytest.raises(InvalidSignature):
        verify_webhook(wrong, headers, body)


def test_a_task_s_own_target_and_trace_context_go_with_its_delivery(client, receiver):
    while not receiver.received.empty():
        receiver.received.get_nowait()
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    made = client.schedule(
        {"order": 7},
        queue="hooks",
        target={"url": receiver.base + "/dest/orders/7", "method": "PUT", "headers": {"x-tenant": "acme"}},
        traceparent=traceparent,
        tracestate="vendor=1",
    )
    stored = client.get(made["id"])
    assert stored["target"]["url"] == receiver.base + "/dest/orders/7"
    assert (stored["traceparent"], stored["tracestate"]) == (traceparent, "vendor=1")
    deadline = time.time() + 30
    while True:
        headers, body = receiver.received.get(timeout=max(0.1, deadline - time.time()))
        if headers.get("ttw-task-id") == str(made["id"]):
            break
    assert (headers[":method"], headers[":path"]) == ("PUT", "/dest/orders/7")
    assert headers["x-tenant"] == "acme"
    assert (headers["traceparent"], headers["tracestate"]) == (traceparent, "vendor=1")
    assert verify_webhook(SECRET, headers, body) == headers["webhook-id"]


def test_each_attempt_is_kept_with_its_status_and_the_answer(client, receiver):
    made = client.schedule({"n": 1}, queue="hooks", target={"url": receiver.base + "/dest/flaky/py"})
    deadline = time.time() + 30
    while True:
        attempts = client.attempts(made["id"])["attempts"]
        if attempts and attempts[-1]["outcome"] == "done":
            break
        assert time.time() < deadline, attempts
        time.sleep(0.05)
    first, second = attempts
    assert (first["attempt"], first["outcome"], first["status"]) == (1, "failed", 503)
    assert "busy, try later" in first["detail"]
    assert (second["attempt"], second["outcome"], second["status"], second["detail"]) == (2, "done", 200, "accepted")
    assert second["node"] and second["started_at"] and second["ended_at"]
    assert second["duration_ms"] is not None
    with pytest.raises(errors.NotFound):
        client.attempts(999999999)


def test_callbacks_are_told_of_the_outcome_signed(client, receiver):
    """A done task's `callback` and a dead task's `failure_callback` each
    get a signed POST of the outcome, with `ttw-outcome-of` and the trace
    context of the task told of; the callback is a task of its own."""
    base = receiver.base
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02"
    done = client.schedule(
        {"order": 8},
        queue="hooks",
        target={"url": base + "/dest/orders/8"},
        callback=base + "/dest/callbacks/done",
        failure_callback=base + "/dest/callbacks/dead",
        traceparent=traceparent,
    )
    dead = client.schedule(
        {"order": 9},
        queue="hooks",
        target={"url": base + "/dest/refuse/9"},
        callback=base + "/dest/callbacks/done",
        failure_callback=base + "/dest/callbacks/dead",
    )
    stored = client.get(done["id"])
    assert (stored["callback"], stored["failure_callback"]) == (
        base + "/dest/callbacks/done",
        base + "/dest/callbacks/dead",
    )
    told = {}
    deadline = time.time() + 30
    while len(told) < 2:
        headers, body = receiver.received.get(timeout=max(0.1, deadline - time.time()))
        origin = headers.get("ttw-outcome-of")
        if origin in (str(done["id"]), str(dead["id"])):
            told[int(origin)] = (headers, body)
    headers, body = told[done["id"]]
    assert (headers[":method"], headers[":path"]) == ("POST", "/dest/callbacks/done")
    assert verify_webhook(SECRET, headers, body) == headers["webhook-id"]
    assert headers["traceparent"] == traceparent
    outcome = json.loads(body)
    assert {k: outcome[k] for k in ("id", "queue", "state", "attempts", "status", "error")} == {
        "id": done["id"],
        "queue": "hooks",
        "state": "done",
        "attempts": 1,
        "status": 200,
        "error": None,
    }
    assert outcome["finished_at"] > 0
    headers, body = told[dead["id"]]
    assert headers[":path"] == "/dest/callbacks/dead"
    assert verify_webhook(SECRET, headers, body) == headers["webhook-id"]
    outcome = json.loads(body)
    assert (outcome["state"], outcome["attempts"], outcome["status"]) == ("dead", 1, 410)
    assert "no such order" in outcome["error"]
    callback_task = client.get(int(headers["ttw-task-id"]))
    assert callback_task["outcome_of"] == dead["id"]
    assert client.get(dead["id"])["state"] == "dead"


def test_a_target_outside_the_token_s_destinations_is_refused(client, receiver):
    for url in [receiver.base + "/hook", "http://169.254.169.254/dest/", receiver.base.replace("127.0.0.1", "localhost") + "/dest/x"]:
        with pytest.raises(errors.DestinationNotAllowed):
            client.schedule({}, queue="hooks", target={"url": url})
    with pytest.raises(errors.DestinationNotAllowed):
        client.schedule({}, queue="hooks", target={"url": "http://10.0.0.1/dest/"})
    with pytest.raises(errors.DestinationNotAllowed):
        client.schedule({}, queue="later", target={"url": receiver.base + "/dest/x"})
    with pytest.raises(errors.InvalidDestination):
        client.schedule({}, queue="hooks", target={"url": receiver.base + "/dest/x", "headers": {"webhook-id": "forged"}})
    with pytest.raises(errors.InvalidTraceContext):
        client.schedule({}, queue="hooks", traceparent="00-abc-01")
    # Callbacks have the same allowlist.
    with pytest.raises(errors.DestinationNotAllowed):
        client.schedule({}, queue="hooks", callback="http://169.254.169.254/dest/")
    with pytest.raises(errors.DestinationNotAllowed):
        client.schedule({}, queue="hooks", failure_callback=receiver.base + "/hook")
    with pytest.raises(errors.DestinationNotAllowed):
        client.schedule({}, queue="later", callback=receiver.base + "/dest/x")
    with pytest.raises(errors.InvalidDestination):
        client.schedule({}, queue="hooks", callback="ftp://127.0.0.1/dest/x")


def test_a_schedule_retried_through_a_stopped_server_is_stored_once(server):
    """The server is stopped (SIGSTOP) when the schedule is sent: the
    request times out and is sent again, with the same idempotency key,
    until the server goes on (SIGCONT). It then reads both requests: the
    task is stored once."""
    client = Client(server.url, TOKEN, timeout=0.5, retries=8, backoff=0.2)
    key = unique("retried")
    before = scheduled(client)
    os.kill(server.process.pid, signal.SIGSTOP)
    every_thread_stopped(server.process.pid)
    threading.Timer(1.5, os.kill, (server.process.pid, signal.SIGCONT)).start()
    started = time.monotonic()
    try:
        made = client.schedule("once", delay="1h", queue="later", idempotency_key=key)
        waited = time.monotonic() - started
    finally:
        time.sleep(1.6)
        os.kill(server.process.pid, signal.SIGCONT)
    assert waited >= 1.0, "the answer came while the server was stopped"
    assert made["outcome"] in ("created", "existing")
    time.sleep(0.5)
    assert scheduled(client) == before + 1
    assert client.get_by_key(key)["id"] == made["id"]


def test_a_client_of_several_instances_moves_past_one_that_is_down(server):
    """A lost or refused connection moves to the next URL: the first one
    here refuses every connection."""
    several = Client(["http://127.0.0.1:9", server.url], TOKEN, retries=2, backoff=0.01)
    assert "queues" in several.counts()
    assert several.base_url == server.url
