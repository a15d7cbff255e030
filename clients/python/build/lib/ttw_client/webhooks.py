"""Checking a delivery's signature (Standard Webhooks: ``webhook-id``,
``webhook-timestamp``, ``webhook-signature``), as the service signs it
with a queue's secret (``whsec_`` and base64)."""

import base64
import hashlib
import hmac
import time
from typing import Mapping, Optional


class InvalidSignature(Exception):
    """A delivery whose signature or timestamp does not check out."""


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> str:
    """Checks a delivery: its signature over ``id.timestamp.body`` with the
    secret, and a timestamp within ``tolerance`` seconds of now. Returns its
    ``webhook-id`` (deduplicate on it: a redelivery carries the same);
    raises :class:`InvalidSignature` otherwise. Header names are matched
    without regard to case."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id = lower.get("webhook-id", "")
    stamp = lower.get("webhook-timestamp", "")
    signatures = lower.get("webhook-signature", "")
    if not (msg_id and stamp and signatures):
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        sent = int(stamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not a number") from None
    if abs((time.time() if now is None else now) - sent) > tolerance:
        raise InvalidSignature("webhook-timestamp is too far from now")
    key = base64.b64decode(secret[len("whsec_"):] if secret.startswith("whsec_") else secret)
    signed = msg_id.encode() + b"." + stamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for part in signatures.split(" "):
        version, _, sig = part.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return msg_id
    raise InvalidSignature("no signature matches")
