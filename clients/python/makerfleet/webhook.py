"""Webhook verification: the Standard Webhooks scheme
(https://www.standardwebhooks.com). A delivery carries the headers
webhook-id, webhook-timestamp (Unix seconds) and webhook-signature: one or
more space-separated "v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">",
keyed with the secret's bytes (the base64 after "whsec_")."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from typing import Any, Mapping, Optional, Union

_MAX_SIGNATURES = 16
_TS_RE = re.compile(r"^[0-9]{1,15}$")


class WebhookVerificationError(Exception):
    """Why a delivery was refused."""


def _key(secret: str) -> bytes:
    b64 = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    try:
        key = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the secret is not whsec_<base64>") from None
    if not key:
        raise WebhookVerificationError("the secret is empty")
    return key


def _raw(body: Union[str, bytes]) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def _mac(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    return hmac.new(key, msg_id.encode("utf-8") + b"." + timestamp.encode("ascii") + b"." + body, hashlib.sha256).digest()


def _header(headers: Mapping[str, Any], name: str) -> Optional[str]:
    get_all = getattr(headers, "get_all", None)  # email.message.Message, http.client.HTTPMessage
    if callable(get_all):
        vals = get_all(name)
        return " ".join(vals) if vals else None
    for k, v in headers.items():
        if k.lower() == name:
            if isinstance(v, (list, tuple)):
                return " ".join(v)
            return v
    return None


def sign_webhook(secret: str, msg_id: str, timestamp: Union[int, str], body: Union[str, bytes]) -> str:
    """The webhook-signature value ("v1,<base64>") of a delivery: what a
    sender computes, and what a test of a receiver needs."""
    mac = _mac(_key(secret), msg_id, str(timestamp), _raw(body))
    return "v1," + base64.b64encode(mac).decode("ascii")


def verify_webhook(
    secret: str,
    headers: Mapping[str, Any],
    body: Union[str, bytes],
    tolerance_seconds: int = 300,
    now: Optional[float] = None,
) -> Any:
    """Checks a delivery: its signature (any one of those the header lists,
    compared in constant time) over the exact body received, and its
    timestamp within tolerance_seconds of now (so a replayed old delivery is
    refused). Returns the body parsed as JSON; raises
    WebhookVerificationError when a check fails. Pass the raw body."""
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    sigs = _header(headers, "webhook-signature")
    if not msg_id or not ts or not sigs:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    if not _TS_RE.match(ts):
        raise WebhookVerificationError("webhook-timestamp is not Unix seconds")
    at = int(ts)
    current = int(time.time() if now is None else now)
    if at < current - tolerance_seconds:
        raise WebhookVerificationError("webhook-timestamp is too old")
    if at > current + tolerance_seconds:
        raise WebhookVerificationError("webhook-timestamp is in the future")
    raw = _raw(body)
    expected = _mac(_key(secret), msg_id, ts, raw)
    listed = [s for s in sigs.split(" ") if s]
    if len(listed) > _MAX_SIGNATURES:
        raise WebhookVerificationError("too many signatures")
    ok = False
    for s in listed:
        version, sep, value = s.partition(",")
        if not sep or version != "v1":
            continue
        try:
            got = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        # Every listed signature is compared (no early exit).
        ok = hmac.compare_digest(got, expected) or ok
    if not ok:
        raise WebhookVerificationError("no matching signature")
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None
