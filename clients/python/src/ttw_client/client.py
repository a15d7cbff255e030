"""The HTTP client of the ttw delayed-task service, on Python's standard
library alone."""

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import datetime
from typing import Any, Dict, Iterator, List, Optional, Union, cast

from ._generated import (
    AttemptsView,
    BatchView,
    CancelledManyView,
    CancelledView,
    ClaimedTask,
    NodesView,
    PageView,
    QueueCountsView,
    QueueView,
    RecurringChanged,
    RecurringPut,
    RecurringView,
    RedrivenOneView,
    RedrivenView,
    RescheduledView,
    ScheduledView,
    SettledView,
    StatsView,
    TaskView,
    WorkerList,
)
from .errors import ApiError, ConnectionFailed, error_for

When = Union[str, datetime]


def _time(at: When) -> str:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise ValueError("run_at needs a time zone (a naive datetime names no instant)")
        return at.isoformat()
    return at


def _delay(delay: Union[str, float, int]) -> str:
    if isinstance(delay, str):
        return delay
    return "%dms" % round(float(delay) * 1000)


def _seconds(delay: Union[str, float, int]) -> float:
    """A delay in seconds: a number, or text as the API takes it (``20s``,
    ``500ms``, ``1m``)."""
    if not isinstance(delay, str):
        return float(delay)
    for unit, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if delay.endswith(unit) and delay[: -len(unit)].replace(".", "", 1).isdigit():
            return float(delay[: -len(unit)]) * scale
    return 60.0


_FILTERS = ("state", "queue", "partition_key", "kind", "idempotency_key", "due_from", "due_before", "created_from", "created_before")


def _selection(filters: Dict[str, Any]) -> Dict[str, Any]:
    """The filters of a page as the API names them, times as RFC 3339."""
    unknown = set(filters) - set(_FILTERS)
    if unknown:
        raise TypeError(f"no such filter: {', '.join(sorted(unknown))}")
    return {k: (_time(v) if k.endswith(("_from", "_before")) else v) for k, v in filters.items() if v is not None}


def _clean(fields: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def new_task(
    payload: Any = None,
    *,
    payload_bytes: Optional[bytes] = None,
    delay: Union[str, float, int, None] = None,
    run_at: Optional[When] = None,
    queue: Optional[str] = None,
    priority: Optional[int] = None,
    max_attempts: Optional[int] = None,
    idempotency_key: Optional[str] = None,
    partition_key: Optional[str] = None,
    kind: Optional[str] = None,
    replace_pending: bool = False,
    max_wait: Union[str, float, int, None] = None,
    target: Optional[Dict[str, Any]] = None,
    traceparent: Optional[str] = None,
    tracestate: Optional[str] = None,
    callback: Optional[str] = None,
    failure_callback: Optional[str] = None,
) -> Dict[str, Any]:
    """One task for :meth:`Client.schedule_many`, as :meth:`Client.schedule`
    takes it: a JSON ``payload`` (kept byte for byte as its JSON text) or
    ``payload_bytes``; ``delay`` (seconds, or ``"15m"``) or ``run_at`` (an
    aware ``datetime`` or RFC 3339 text). ``target`` (``{"url", "method",
    "headers"}``) must be under one of the token's ``destinations``; ``traceparent`` and ``tracestate`` (W3C)
    are sent with every delivery. ``callback`` is told of the outcome once
    the task is done, ``failure_callback`` once it is dead: a signed
    ``POST`` of a ``CallbackOutcome``, under the same ``destinations``.
    ``kind`` names a typed job: its arguments are the JSON ``payload``."""
    if payload is not None and payload_bytes is not None:
        raise ValueError("payload or payload_bytes, not both")
    if delay is not None and run_at is not None:
        raise ValueError("delay or run_at, not both")
    task = _clean(
        {
            "payload": payload,
            "payload_base64": base64.b64encode(payload_bytes).decode() if payload_bytes is not None else None,
            "delay": _delay(delay) if delay is not None else None,
            "run_at": _time(run_at) if run_at is not None else None,
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "idempotency_key": idempotency_key,
            "partition_key": partition_key,
            "kind": kind,
            "max_wait": _delay(max_wait) if max_wait is not None else None,
            "target": target,
            "traceparent": traceparent,
            "tracestate": tracestate,
            "callback": callback,
            "failure_callback": failure_callback,
        }
    )
    if replace_pending:
        task["replace_pending"] = True
    return task


class Client:
    """A client of a ``ttw server`` (or several instances of one service:
    give a list of URLs, and a lost or refused connection moves to the next).

    Requests that are safe to repeat are retried on a 503 ``unavailable``
    and on a lost or refused connection (``retries`` times, the wait
    doubling from ``backoff`` seconds): reads, cancels, reschedules,
    settings, and schedules, which always carry an idempotency key (a
    schedule given none gets a random one, so a retry stores it once). A
    redrive is not retried. Other refusals raise the exception of their
    code (:mod:`ttw_client.errors`).
    """

    def __init__(
        self,
        base_url: Union[str, List[str]],
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.25,
    ):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("base_url: one URL or more")
        #: The instances, tried in turn: a lost or refused connection moves
        #: to the next one.
        self.base_urls = [u.rstrip("/") for u in urls]
        self.base_url = self.base_urls[0]
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    # The transport.

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Optional[Dict[str, Any]] = None,
        retry: bool = True,
        timeout: Optional[float] = None,
    ) -> Any:
        suffix = path
        if query:
            suffix += "?" + urllib.parse.urlencode(_clean(query))
        data = json.dumps(body).encode() if body is not None else None
        headers = {"authorization": "Bearer " + self.token, "accept": "application/json"}
        if data is not None:
            headers["content-type"] = "application/json"
        wait = self.backoff
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            url = self.base_url + suffix
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                    text = answer.read()
                    return json.loads(text) if text else None
            except urllib.error.HTTPError as refused:
                text = refused.read()
                try:
                    detail = json.loads(text)["error"]
                    code, message = detail["code"], detail["message"]
                except (ValueError, KeyError, TypeError):
                    code, message = "", text.decode("utf-8", "replace")
                if refused.code == 503 and not last:
                    time.sleep(wait)
                    wait *= 2
                    continue
                raise error_for(refused.code, code, message) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as lost:
                if last:
                    raise ConnectionFailed(f"{method} {url}: {lost}") from None
                # The next instance, if there are more.
                self.base_url = self.base_urls[(self.base_urls.index(self.base_url) + 1) % len(self.base_urls)]
                time.sleep(wait)
                wait *= 2
        raise AssertionError("unreachable")

    # Tasks.

    def schedule(self, payload: Any = None, **fields: Any) -> ScheduledView:
        """Schedules one task (the arguments of :func:`new_task`): its
        ``id`` and ``outcome`` (``created``, ``existing`` for a pending task
        of the key, ``replaced``)."""
        task = new_task(payload, **fields)
        task.setdefault("idempotency_key", "py-" + uuid.uuid4().hex)
        return cast(ScheduledView, self._request("POST", "/v1/tasks", task))

    def schedule_many(self, tasks: List[Dict[str, Any]]) -> BatchView:
        """Schedules a batch (tasks made by :func:`new_task`), in one
        transaction: one answer per task, in order."""
        batch = []
        for task in tasks:
            task = dict(task)
            task.setdefault("idempotency_key", "py-" + uuid.uuid4().hex)
            batch.append(task)
        return cast(BatchView, self._request("POST", "/v1/tasks/batch", {"tasks": batch}))

    def get(self, task_id: int) -> TaskView:
        """A task by id; :class:`~ttw_client.errors.NotFound` if there is none."""
        return cast(TaskView, self._request("GET", "/v1/tasks/%d" % task_id))

    def attempts(self, task_id: int) -> AttemptsView:
        """A task's attempts, oldest first: each that failed or was cut short
        by a crash (``interrupted``), the one running now and the one that
        succeeded, with its node, times, HTTP status and the answer's first
        bytes or the error."""
        return cast(AttemptsView, self._request("GET", "/v1/tasks/%d/attempts" % task_id))

    def get_by_key(self, key: str) -> TaskView:
        """The task of an idempotency key."""
        return cast(TaskView, self._request("GET", "/v1/keys/" + urllib.parse.quote(key, safe="")))

    def cancel(self, task_id: int) -> CancelledView:
        """Cancels a scheduled task; :class:`~ttw_client.errors.NotScheduled` once it ran."""
        return cast(CancelledView, self._request("DELETE", "/v1/tasks/%d" % task_id))

    def cancel_by_key(self, key: str) -> CancelledView:
        """Cancels the scheduled task of a key."""
        return cast(CancelledView, self._request("DELETE", "/v1/keys/" + urllib.parse.quote(key, safe="")))

    def reschedule(self, task_id: int, *, delay: Union[str, float, int, None] = None, run_at: Optional[When] = None) -> RescheduledView:
        """Moves a scheduled task to ``delay`` from now or to ``run_at``."""
        return cast(RescheduledView, self._request("POST", "/v1/tasks/%d/reschedule" % task_id, self._when(delay, run_at)))

    def reschedule_by_key(self, key: str, *, delay: Union[str, float, int, None] = None, run_at: Optional[When] = None) -> RescheduledView:
        """Moves the scheduled task of a key."""
        path = "/v1/keys/" + urllib.parse.quote(key, safe="") + "/reschedule"
        return cast(RescheduledView, self._request("POST", path, self._when(delay, run_at)))

    @staticmethod
    def _when(delay: Union[str, float, int, None], run_at: Optional[When]) -> Dict[str, Any]:
        if (delay is None) == (run_at is None):
            raise ValueError("delay or run_at, one of them")
        return {"delay": _delay(delay)} if delay is not None else {"run_at": _time(cast(When, run_at))}

    def page(self, *, order: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None, **filters: Any) -> PageView:
        """One page of tasks in id order (``order="desc"``: the newest
        first; ``"due"``/``"due_desc"``: by due time, the soonest or the
        latest first), and the cursor of the next. The filters: ``state``,
        ``queue``, ``partition_key``, ``idempotency_key``, ``due_from``,
        ``due_before``, ``created_from``, ``created_before``."""
        query = dict(_selection(filters), order=order, limit=limit, cursor=cursor)
        return cast(PageView, self._request("GET", "/v1/tasks", query=query))

    def tasks(self, **filters: Any) -> Iterator[TaskView]:
        """Every task that matches (the filters of :meth:`page`), page after
        page by cursor."""
        cursor = None
        while True:
            page = self.page(cursor=cursor, **filters)
            yield from page["tasks"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def redrive(self, *, limit: Optional[int] = None, spread: Union[str, float, int, None] = None, dry_run: bool = False, **filters: Any) -> RedrivenView:
        """Runs finished tasks again (dead ones by default), chosen by the
        filters of :meth:`page`; ``dry_run`` only counts them. Not retried."""
        body = _clean(dict(_selection(filters), limit=limit, spread=_delay(spread) if spread is not None else None, dry_run=dry_run or None))
        return cast(RedrivenView, self._request("POST", "/v1/tasks/redrive", body, retry=False))

    def cancel_matching(self, *, limit: Optional[int] = None, dry_run: bool = False, **filters: Any) -> CancelledManyView:
        """Cancels the scheduled tasks the filters of :meth:`page` choose
        (at most ``limit``, 1,000 by default); ``dry_run`` only counts
        them. Not retried."""
        body = _clean(dict(_selection(filters), limit=limit, dry_run=dry_run or None))
        return cast(CancelledManyView, self._request("POST", "/v1/tasks/cancel", body, retry=False))

    def redrive_task(self, task_id: int) -> RedrivenOneView:
        """Runs a dead task again, due at once with its attempts reset."""
        return cast(RedrivenOneView, self._request("POST", f"/v1/tasks/{int(task_id)}/redrive", retry=False))

    def nodes(self) -> NodesView:
        """The nodes and the leases each holds."""
        return cast(NodesView, self._request("GET", "/v1/nodes"))

    def stats(self) -> StatsView:
        """The answering instance's node over the last hour: throughput and
        lateness per sampling interval."""
        return cast(StatsView, self._request("GET", "/v1/stats"))

    def counts(self) -> QueueCountsView:
        """Tasks per queue and state: ``{"queues": {"emails": {"scheduled": 3, ...}}}``."""
        return cast(QueueCountsView, self._request("GET", "/v1/counts"))

    # Pull queues (a token with the ``consume`` scope).

    def claim(
        self,
        queue: str,
        worker: str,
        *,
        max: int = 1,
        wait: Union[str, float, int, None] = None,
        lease: Union[str, float, int, None] = None,
        kinds: Optional[List[str]] = None,
    ) -> List[ClaimedTask]:
        """Claims up to ``max`` (1–100) due tasks of pull queue ``queue``,
        each leased to ``worker`` for ``lease`` (1 s to 12 h, 30 s by
        default): at once if some are due, else the moment one falls due
        within ``wait`` (at most 60 s; none: answer at once), else none.
        ``kinds`` takes only tasks of those kinds. Each task carries its
        ``claim``, which its :meth:`ack`, :meth:`nack` or :meth:`extend`
        names. A claim whose answer is lost holds its tasks until their
        lease ends; retried as the other calls are."""
        body = _clean(
            {
                "worker": worker,
                "max": max,
                "wait": _delay(wait) if wait is not None else None,
                "lease": _delay(lease) if lease is not None else None,
                "kinds": kinds,
            }
        )
        waits = _seconds(wait) if wait is not None else 0.0
        path = "/v1/queues/%s/claim" % urllib.parse.quote(queue, safe="")
        answer = self._request("POST", path, body, timeout=self.timeout + waits)
        return cast(List[ClaimedTask], answer["tasks"])

    def ack(self, task_id: int, claim: str, answer: Optional[str] = None) -> SettledView:
        """The attempt of ``claim`` succeeded: the task is done (``answer``
        kept as its attempt's answer). :class:`~ttw_client.errors.StaleClaim`
        if the claim no longer holds the task (its lease ran out, or it was
        settled); nothing changes then."""
        body = _clean({"claim": claim, "answer": answer})
        return cast(SettledView, self._request("POST", "/v1/tasks/%d/ack" % task_id, body))

    def nack(
        self,
        task_id: int,
        claim: str,
        error: str,
        *,
        retry_in: Union[str, float, int, None] = None,
        dead: bool = False,
    ) -> SettledView:
        """The attempt of ``claim`` failed with ``error``: due again after
        the queue's backoff (or ``retry_in``), dead once out of attempts or
        when ``dead``. :class:`~ttw_client.errors.StaleClaim` as for :meth:`ack`."""
        body = _clean({"claim": claim, "error": error, "retry_in": _delay(retry_in) if retry_in is not None else None, "dead": dead or None})
        return cast(SettledView, self._request("POST", "/v1/tasks/%d/nack" % task_id, body))

    def extend(self, task_id: int, claim: str, lease: Union[str, float, int]) -> SettledView:
        """Holds the task of ``claim`` for ``lease`` from now (a heartbeat
        while its work runs): its new ``lease_until``."""
        body = {"claim": claim, "lease": _delay(lease)}
        return cast(SettledView, self._request("POST", "/v1/tasks/%d/extend" % task_id, body))

    def workers(self, queue: str) -> WorkerList:
        """The workers that claimed from pull queue ``queue`` in the last
        day: each one's ``worker``, ``last_seen`` and the tasks it ``held``."""
        return cast(WorkerList, self._request("GET", "/v1/queues/%s/workers" % urllib.parse.quote(queue, safe="")))

    # Recurring schedules.

    def put_recurring(self, name: str, *, cron: Optional[str] = None, time_zone: Optional[str] = None, every: Union[str, float, int, None] = None, payload: Any = None, payload_bytes: Optional[bytes] = None, **fields: Any) -> RecurringPut:
        """Creates or updates a recurring schedule: ``cron`` (with
        ``time_zone``) or ``every``; ``queue``, ``priority``,
        ``max_attempts``, ``catch_up``, ``missed_after`` as the API takes them."""
        body = _clean(
            dict(
                fields,
                cron=cron,
                time_zone=time_zone,
                every=_delay(every) if every is not None else None,
                payload=payload,
                payload_base64=base64.b64encode(payload_bytes).decode() if payload_bytes is not None else None,
            )
        )
        return cast(RecurringPut, self._request("PUT", "/v1/recurring/" + urllib.parse.quote(name, safe=""), body))

    def recurring(self) -> List[RecurringView]:
        """Every recurring schedule."""
        return cast(List[RecurringView], self._request("GET", "/v1/recurring")["recurring"])

    def pause_recurring(self, name: str) -> RecurringChanged:
        """Stops making its occurrences tasks until resumed."""
        return cast(RecurringChanged, self._request("POST", "/v1/recurring/%s/pause" % urllib.parse.quote(name, safe="")))

    def resume_recurring(self, name: str) -> RecurringChanged:
        """Makes its occurrences tasks again, from the next one."""
        return cast(RecurringChanged, self._request("POST", "/v1/recurring/%s/resume" % urllib.parse.quote(name, safe="")))

    def delete_recurring(self, name: str) -> RecurringChanged:
        """Deletes it (its occurrences already made tasks stay)."""
        return cast(RecurringChanged, self._request("DELETE", "/v1/recurring/" + urllib.parse.quote(name, safe="")))

    # Queues.

    def queues(self) -> List[QueueView]:
        """The settings of every queue."""
        return cast(List[QueueView], self._request("GET", "/v1/queues")["queues"])

    def queue(self, name: str) -> QueueView:
        """One queue's settings."""
        return cast(QueueView, self._request("GET", "/v1/queues/" + urllib.parse.quote(name, safe="")))

    def pause_queue(self, name: str) -> QueueView:
        """Every node stops starting the queue's tasks."""
        return cast(QueueView, self._request("POST", "/v1/queues/%s/pause" % urllib.parse.quote(name, safe="")))

    def resume_queue(self, name: str) -> QueueView:
        """Every node starts the queue's tasks again."""
        return cast(QueueView, self._request("POST", "/v1/queues/%s/resume" % urllib.parse.quote(name, safe="")))

    def set_limits(self, name: str, **limits: Any) -> QueueView:
        """``concurrency``, ``per_key_concurrency``, ``rate``
        (``{"count": 100, "per": "1s", "burst": 10}``), as the API takes them."""
        return cast(QueueView, self._request("PUT", "/v1/queues/%s/limits" % urllib.parse.quote(name, safe=""), limits))

    def set_retry(self, name: str, **retry: Any) -> QueueView:
        """``max_attempts`` and ``backoff`` (``{"base": "1s", "max": "10m"}``)."""
        return cast(QueueView, self._request("PUT", "/v1/queues/%s/retry" % urllib.parse.quote(name, safe=""), retry))


__all__ = ["Client", "new_task", "ApiError", "ConnectionFailed"]
