"""The worker against a real `ttw server`'s pull queue `work`: it runs,
acks and nacks; it keeps a long task by extending its lease; a worker
SIGKILLed mid-task has its task back at the lease's end as the next
attempt; SIGTERM finishes what it holds; a lost server is retried with a
growing wait."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import HERE, TOKEN
from ttw_client import Client, ConnectionFailed, GiveUp, Worker


def outcomes(client, task_id):
    return [a["outcome"] for a in client.attempts(task_id)["attempts"]]


def wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("not within %s s" % seconds)


def drain(client):
    """Leaves queue `work` empty of due tasks (a test's leftovers)."""
    while True:
        tasks = client.claim("work", "drain", max=100)
        if not tasks:
            return
        for task in tasks:
            client.ack(task["id"], task["claim"])


@pytest.fixture
def work(client):
    client.set_retry("work", max_attempts=5, backoff={"base": "100ms", "max": "200ms"})
    drain(client)
    return client


def started(worker):
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_a_worker_runs_acks_and_nacks_with_the_handler_s_error(work):
    failed_once = set()
    seen = []

    def handler(task):
        n = task["payload"]["n"]
        seen.append((n, task["attempt"]))
        if n == 1 and n not in failed_once:
            failed_once.add(n)
            raise ValueError("the image is not ready")
        if n == 2:
            raise GiveUp("no such image")
        return "resized %d" % n

    ids = [work.schedule({"n": n}, queue="work", kind="resize")["id"] for n in range(4)]
    worker = Worker(work, "work", handler, concurrency=2, name="py-worker", wait="1s")
    thread = started(worker)
    wait_for(lambda: all(work.get(i)["state"] in ("done", "dead") for i in ids))
    worker.stop()
    thread.join(15)
    assert not thread.is_alive()
    states = [work.get(i)["state"] for i in ids]
    assert states == ["done", "done", "dead", "done"]
    assert outcomes(work, ids[1]) == ["failed", "done"]
    attempts = work.attempts(ids[1])["attempts"]
    assert attempts[0]["detail"] == "ValueError: the image is not ready"
    assert attempts[0]["node"] == "py-worker"
    assert attempts[1]["detail"] == "resized 1"
    assert work.get(ids[2])["last_error"] == "no such image"
    assert sorted(seen) == [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)]
    assert (worker.acked, worker.nacked, worker.lost) == (3, 2, 0)
    seen = {w["worker"]: w for w in work.workers("work")["workers"]}
    assert seen["py-worker"]["held"] == 0


def test_a_long_task_is_kept_by_extending_its_lease(work):
    task_id = work.schedule("long", queue="work")["id"]
    worker = Worker(work, "work", lambda task: time.sleep(3.5) or "slow", lease="1s", wait="1s")
    thread = started(worker)
    wait_for(lambda: work.get(task_id)["state"] == "running")
    # Past three of its leases, no other worker is handed it.
    assert work.claim("work", "rival", wait="3s") == []
    wait_for(lambda: work.get(task_id)["state"] == "done")
    worker.stop()
    thread.join(15)
    assert outcomes(work, task_id) == ["done"]
    assert worker.lost == 0


CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from ttw_client import Client, Worker

def handler(task):
    print("started", task["id"], flush=True)
    time.sleep(float(sys.argv[4]))
    print("finished", task["id"], flush=True)
    return "finished"

Worker(Client(sys.argv[2], sys.argv[3]), "work", handler, lease="2s", wait="1s", name="child").run()
print("stopped", flush=True)
"""


def child_worker(server, seconds):
    """A worker in a process of its own whose handler takes `seconds`."""
    src = str(HERE.parent / "src")
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, src, server.url, TOKEN, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_sigkilled_worker_s_task_is_back_at_its_lease_end(server, work):
    task_id = work.schedule("k", queue="work")["id"]
    child = child_worker(server, 600)
    assert child.stdout.readline().split() == ["started", str(task_id)]
    killed = time.monotonic()
    child.send_signal(signal.SIGKILL)
    child.wait()
    again = work.claim("work", "heir", wait="30s", lease="30s")
    assert time.monotonic() - killed >= 1.0, "taken back before the lease could end"
    assert [(t["id"], t["attempt"]) for t in again] == [(task_id, 2)]
    work.ack(task_id, again[0]["claim"])
    assert outcomes(work, task_id) == ["expired", "done"]


def test_sigterm_finishes_what_the_worker_holds(server, work):
    task_id = work.schedule("t", queue="work")["id"]
    child = child_worker(server, 1.5)
    assert child.stdout.readline().split() == ["started", str(task_id)]
    child.send_signal(signal.SIGTERM)
    rest = child.communicate(timeout=30)[0].split("\n")
    assert child.returncode == 0
    assert rest[:2] == ["finished %d" % task_id, "stopped"]
    assert work.get(task_id)["state"] == "done"
    assert outcomes(work, task_id) == ["done"]


def test_a_lost_server_is_retried_with_a_growing_wait():
    lost = Client("http://127.0.0.1:9", "t", retries=0, timeout=1)
    calls = []
    claim = lost.claim

    def counted(*args, **kwargs):
        calls.append(time.monotonic())
        return claim(*args, **kwargs)

    lost.claim = counted  # type: ignore[method-assign]
    worker = Worker(lost, "work", lambda task: None, max_backoff=0.5)
    thread = started(worker)
    wait_for(lambda: len(calls) >= 4, 10)
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert gaps[0] >= 0.2 and gaps[2] >= 0.45, gaps
    with pytest.raises(ConnectionFailed):
        claim("work", "w")
