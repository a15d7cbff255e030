"""A client of the ttw delayed-task service (``ttw server``): schedule
tasks, read, cancel and move them, manage recurring schedules and queues,
check the webhooks it delivers, and work a pull queue (:class:`Worker`). Python's standard library only.

>>> from ttw_client import Client
>>> ttw = Client("http://127.0.0.1:8080", token="...")          # doctest: +SKIP
>>> ttw.schedule({"order": 42}, delay="15m", queue="orders")   # doctest: +SKIP
{'id': 1, 'outcome': 'created'}
"""

from . import errors
from ._generated import CODES
from .client import Client, new_task
from .errors import ApiError, ConnectionFailed, TtwError
from .webhooks import InvalidSignature, verify_webhook
from .worker import GiveUp, Retry, Worker

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "CODES",
    "Client",
    "ConnectionFailed",
    "GiveUp",
    "InvalidSignature",
    "Retry",
    "TtwError",
    "Worker",
    "errors",
    "new_task",
    "verify_webhook",
]
