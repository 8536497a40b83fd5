"""Error answers of the API as MakerAPIError (RFC 9457 problem details)."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, List, Mapping, Optional

#: PROBLEM_BASE starts every problem type URI the API sends (docs/api.md lists them).
PROBLEM_BASE = "https://makerfleet.dev/problems/"

#: MAX_ERROR_BODY bounds how much of an error answer is read.
MAX_ERROR_BODY = 1 << 20


class MakerAPIError(Exception):
    """An error answer: the server's problem details, or, from a server or
    proxy that sends none, a problem made of the HTTP status.

    Attributes: type (the problem type URI), title, status, detail,
    instance (the request's path), errors (the failing fields, each
    {"path": JSON pointer, "message": ...}), state (a job's state on 409
    not-finished), retry_after (the Retry-After seconds, or None) and
    problem (the document as sent, with any other member).
    """

    def __init__(self, problem: Mapping[str, Any], retry_after: Optional[int] = None) -> None:
        self.problem: Dict[str, Any] = dict(problem)
        self.type: str = str(problem.get("type", "about:blank"))
        self.title: str = str(problem.get("title", ""))
        self.status: int = int(problem.get("status", 0))
        self.detail: Optional[str] = problem.get("detail")
        self.instance: Optional[str] = problem.get("instance")
        self.errors: List[Dict[str, str]] = list(problem.get("errors") or [])
        self.state: Optional[str] = problem.get("state")
        self.retry_after = retry_after
        super().__init__(self._message())

    @property
    def kind(self) -> str:
        """The last part of the type URI: "not-found", "invalid-request"..."""
        return self.type.rsplit("/", 1)[-1]

    def _message(self) -> str:
        s = "%d %s" % (self.status, self.title)
        if self.detail:
            s += ": " + self.detail
        for f in self.errors:
            if f.get("message") != self.detail:
                s += "; %s: %s" % (f.get("path") or "/", f.get("message"))
        return s


def parse_retry_after(value: Optional[str]) -> Optional[int]:
    """Reads Retry-After: delta-seconds or an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    v = value.strip()
    if v.isdigit():
        return int(v)
    try:
        at = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if at is None:
        return None
    return max(0, int(at.timestamp() - time.time() + 0.999))


def problem_of(status: int, reason: str, headers: Mapping[str, str], body: bytes) -> MakerAPIError:
    """Makes the MakerAPIError of an error answer."""
    retry_after = parse_retry_after(headers.get("Retry-After"))
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace")
    if ctype in ("application/problem+json", "application/json"):
        try:
            p = json.loads(text)
        except ValueError:
            p = None
        if (isinstance(p, dict) and isinstance(p.get("status"), int) and p.get("status")
                and isinstance(p.get("type"), str) and isinstance(p.get("title"), str)):
            return MakerAPIError(p, retry_after)
    problem: Dict[str, Any] = {"type": "about:blank", "title": reason or "HTTP %d" % status, "status": status}
    d = text.strip()
    if d:
        problem["detail"] = d if len(d) <= 300 else d[:300] + "…"
    return MakerAPIError(problem, retry_after)
