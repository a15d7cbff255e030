"""A worker of a pull queue: it long-polls ``ttw server`` for due tasks,
runs a handler on each in a pool of threads, extends each lease while its
handler runs, and acks the task (the handler returned) or nacks it (the
handler raised: its message is the attempt's error)."""

import logging
import os
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Union

from ._generated import ClaimedTask
from .client import Client, _seconds
from .errors import ApiError, ConnectionFailed, StaleClaim  # type: ignore[attr-defined]

log = logging.getLogger("ttw_client.worker")

#: A handler: given the task as claimed (``payload``, ``id``, ``attempt``,
#: ``kind``, ``message_id``...), its return value (text or ``None``) is the
#: attempt's answer; an exception nacks the task with its message.
Handler = Callable[[ClaimedTask], Optional[str]]


class Retry(Exception):
    """Raised by a handler: the task is due again after ``retry_in``
    (seconds, or text such as ``"30s"``) rather than the queue's backoff."""

    def __init__(self, message: str, retry_in: Union[str, float, int]):
        super().__init__(message)
        self.retry_in = retry_in


class GiveUp(Exception):
    """Raised by a handler: the task is dead now, whatever attempts are left
    (retrying cannot help)."""


class Worker:
    """Serves pull queue ``queue`` with ``handler``, at most ``concurrency``
    tasks at a time.

    It claims only what it has room for (``max`` = the free slots), so a
    busy worker takes nothing it cannot run: the others get it. Each claim
    waits up to ``wait`` for a task to fall due and is answered the moment
    one does. Each task is leased for ``lease``; while its handler runs, the
    lease is extended every third of it, so a handler may run for longer
    than a lease, and a worker that dies (even SIGKILLed) holds its tasks
    no longer than a lease. A 503 or a lost connection is retried with a
    growing wait (up to ``max_backoff`` seconds).

    :meth:`run` blocks until :meth:`stop`, or SIGTERM or SIGINT when run on
    the main thread: then it claims no more, lets the poll under way end
    (at most ``wait``), and finishes every task it holds before it returns.
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 1,
        name: Optional[str] = None,
        lease: Union[str, float, int] = "30s",
        wait: Union[str, float, int] = "10s",
        kinds: Optional[List[str]] = None,
        max_backoff: float = 10.0,
    ):
        if concurrency < 1 or concurrency > 100:
            raise ValueError("concurrency: 1 to 100")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.lease = _seconds(lease)
        self.wait = wait
        self.kinds = kinds
        self.max_backoff = max_backoff
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._room = threading.Semaphore(concurrency)
        self._held: Dict[int, str] = {}
        self._lock = threading.Lock()
        #: Tasks acked, nacked, and lost (their claim went stale), so far.
        self.acked = 0
        self.nacked = 0
        self.lost = 0

    def stop(self) -> None:
        """Claims no more; :meth:`run` returns once what it holds is done."""
        self._stopping.set()

    def run(self) -> None:
        """Claims and runs tasks until stopped (see the class)."""
        restore = self._on_signals()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="ttw-worker")
        beat = threading.Thread(target=self._extend_leases, name="ttw-worker-leases", daemon=True)
        beat.start()
        backoff = 0.25
        try:
            while not self._stopping.is_set():
                free = self._take_room()
                if free == 0:
                    continue
                try:
                    tasks = self.client.claim(self.queue, self.name, max=free, wait=self.wait, lease=self.lease, kinds=self.kinds)
                    backoff = 0.25
                except (ConnectionFailed, ApiError) as err:
                    self._give_room(free)
                    if isinstance(err, ApiError) and err.status not in (429, 503):
                        raise
                    log.warning("ttw worker %s: claim failed (%s); again in %.2f s", self.name, err, backoff)
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                self._give_room(free - len(tasks))
                for task in tasks:
                    with self._lock:
                        self._held[task["id"]] = task["claim"]
                    pool.submit(self._run_one, task)
        finally:
            pool.shutdown(wait=True)
            self._stopping.set()
            self._finished.set()
            beat.join()
            restore()

    def _take_room(self) -> int:
        """Waits for a free slot (or the stop), then takes every free one."""
        if not self._room.acquire(timeout=0.2):
            return 0
        free = 1
        while free < self.concurrency and self._room.acquire(blocking=False):
            free += 1
        return free

    def _give_room(self, n: int) -> None:
        for _ in range(n):
            self._room.release()

    def _run_one(self, task: ClaimedTask) -> None:
        task_id, claim = task["id"], task["claim"]
        try:
            try:
                answer = self.handler(task)
            except Retry as retry:
                self._settle(task_id, lambda: self.client.nack(task_id, claim, str(retry) or "retry", retry_in=retry.retry_in))
            except GiveUp as dead:
                self._settle(task_id, lambda: self.client.nack(task_id, claim, str(dead) or "gave up", dead=True))
            except Exception as failed:  # noqa: BLE001 - a handler's failure is the attempt's error
                error = f"{type(failed).__name__}: {failed}"
                self._settle(task_id, lambda: self.client.nack(task_id, claim, error[:1024]))
            else:
                text = None if answer is None else str(answer)[:1024]
                self._settle(task_id, lambda: self.client.ack(task_id, claim, text))
        finally:
            with self._lock:
                self._held.pop(task_id, None)
            self._room.release()

    def _settle(self, task_id: int, call: Callable[[], Any]) -> None:
        try:
            outcome = call()
        except StaleClaim:
            # The lease ran out before the settle (or a retried settle had
            # landed): the task is another attempt's now.
            with self._lock:
                self.lost += 1
            log.warning("ttw worker %s: task %d: the claim is stale; its outcome was not kept", self.name, task_id)
            return
        except (ConnectionFailed, ApiError) as err:
            # Not settled: the task is due again when its lease ends.
            with self._lock:
                self.lost += 1
            log.warning("ttw worker %s: task %d: not settled (%s); due again at its lease's end", self.name, task_id, err)
            return
        with self._lock:
            if outcome["outcome"] == "done":
                self.acked += 1
            else:
                self.nacked += 1

    def _extend_leases(self) -> None:
        """Every third of a lease, extends the lease of each task held."""
        every = max(self.lease / 3.0, 0.2)
        while not self._finished.wait(every):
            with self._lock:
                held = list(self._held.items())
            for task_id, claim in held:
                try:
                    self.client.extend(task_id, claim, self.lease)
                except StaleClaim:
                    # Settled between the list above and this call: not a loss.
                    with self._lock:
                        still_held = self._held.get(task_id) == claim
                    if still_held:
                        log.warning("ttw worker %s: task %d: its lease ran out while it ran", self.name, task_id)
                except (ConnectionFailed, ApiError) as err:
                    log.warning("ttw worker %s: task %d: lease not extended (%s)", self.name, task_id, err)

    def _on_signals(self) -> Callable[[], None]:
        """On the main thread, SIGTERM and SIGINT stop the worker; returns
        what puts the old handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        for sig in old:
            signal.signal(sig, lambda *_: self.stop())

        def restore() -> None:
            for sig, handler in old.items():
                signal.signal(sig, handler)

        return restore
