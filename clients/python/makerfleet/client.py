"""MakerClient: one API server (maker serve), one key."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from .errors import MakerAPIError, problem_of
from .sse import parse_sse

#: Job states after which a job changes no more.
TERMINAL_STATES = ("solved", "unsolved", "no_consensus", "failed", "cancelled")

#: Batch states after which a batch changes no more.
BATCH_ENDED = ("completed", "cancelled")

JSON = Dict[str, Any]
BatchLine = Union[Mapping[str, Any], str]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # The API never redirects: a redirect is an error answer, so the key is
    # never sent to another address.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


class JobEvent:
    """One event of a job's event stream: event is "status" (data a
    job_status) or, last, "report" (data the job_report)."""

    __slots__ = ("event", "data")

    def __init__(self, event: str, data: Any) -> None:
        self.event = event
        self.data = data

    def __repr__(self) -> str:
        return "JobEvent(%r, %r)" % (self.event, self.data)


class MakerClient:
    """Calls one API server with one key. Every error answer is raised as a
    MakerAPIError; idempotent calls (reads, PUTs, controls, and a submit
    naming its job_id) answered 429 or 503 are tried again after the
    Retry-After wait, at most max_retries times, when the wait is at most
    max_retry_delay seconds.

    timeout is each socket operation's (an event stream sends a ping every
    15 s, so keep it above that). opener replaces the urllib opener (tests).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        tenant: Optional[str] = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_retry_delay: float = 30.0,
        user_agent: str = "makerfleet-python",
        max_event_bytes: int = 16 << 20,
        opener: Optional[urllib.request.OpenerDirector] = None,
    ) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError("makerfleet: base URL %r: want http(s)://host[:port]" % base_url)
        if not api_key:
            raise ValueError("makerfleet: no API key")
        self.base_url = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path.rstrip("/"), "", ""))
        self._key = api_key
        self._tenant = tenant
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._max_retry_delay = max_retry_delay
        self._ua = user_agent
        self._max_event_bytes = max_event_bytes
        self._opener = opener or urllib.request.build_opener(_NoRedirect())
        self._sleep: Callable[[float], None] = time.sleep

    def for_tenant(self, tenant: str) -> "MakerClient":
        """A client acting on tenant's jobs and dead letters (an admin key's)."""
        c = MakerClient.__new__(MakerClient)
        c.__dict__.update(self.__dict__)
        c._tenant = tenant
        return c

    # Jobs.

    def submit_job(self, job: Mapping[str, Any]) -> JSON:
        """Submits a job (a JobRequest: task, params, k, job_id...) as the
        key's tenant. The same job under the same job_id again answers
        duplicate True (so a submit naming its job_id is retried safely);
        another job under a taken id is a 409 problem; an invalid one 422
        naming the failing field in errors."""
        return self._json("POST", "/v1/jobs", body=json.dumps(job).encode(), idempotent=bool(job.get("job_id")))

    def get_job(self, job_id: str) -> JSON:
        """The job's state and progress (another tenant's job is 404)."""
        return self._json("GET", "/v1/jobs/" + _seg(job_id))

    def list_jobs(self, state: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> JSON:
        """A page of the tenant's jobs: {"jobs": [...], "next_cursor": ...}."""
        out = self._json("GET", "/v1/jobs", query={"state": state, "limit": limit, "cursor": cursor})
        if out.get("jobs") is None:
            out["jobs"] = []
        return out

    def iter_jobs(self, state: Optional[str] = None, limit: Optional[int] = None) -> Iterator[JSON]:
        """Every job of the tenant (in state, when given), page by page."""
        cursor: Optional[str] = None
        while True:
            page = self.list_jobs(state=state, limit=limit, cursor=cursor)
            for j in page["jobs"]:
                yield j
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def get_result(self, job_id: str) -> JSON:
        """A finished job's report; before it has one, a 409 problem of kind
        not-finished whose state says where the job stands."""
        return self._json("GET", "/v1/jobs/%s/result" % _seg(job_id))

    def pause(self, job_id: str) -> JSON:
        """Asks the job to pause at its next step boundary."""
        return self._control(job_id, "pause", {})

    def resume(self, job_id: str) -> JSON:
        """Asks a paused (or budget-exhausted) job to run on."""
        return self._control(job_id, "resume", {})

    def cancel(self, job_id: str) -> JSON:
        """Asks the job to end for good at its next step boundary."""
        return self._control(job_id, "cancel", {})

    def decide(self, job_id: str, step: int, answer: str) -> JSON:
        """Answers the step the job waits at for a person (approver and admin keys only)."""
        return self._control(job_id, "decide", {"step": step, "answer": answer})

    def _control(self, job_id: str, action: str, body: Mapping[str, Any]) -> JSON:
        return self._json("POST", "/v1/jobs/%s/%s" % (_seg(job_id), action), body=json.dumps(body).encode(), idempotent=True)

    def get_budget(self, job_id: str) -> JSON:
        """The job's budget: its limit, what it spent and what it has reserved."""
        return self._json("GET", "/v1/jobs/%s/budget" % _seg(job_id))

    def set_budget(self, job_id: str, usd: float) -> JSON:
        """Sets the job's budget in US dollars; raise it, then resume a budget_exhausted job."""
        return self._json("PUT", "/v1/jobs/%s/budget" % _seg(job_id), body=json.dumps({"budget_usd": usd}).encode())

    def events(self, job_id: str) -> Iterator[JobEvent]:
        """Follows the job's event stream: a status event now and on every
        change, then the report event once the job finishes, and the
        iteration ends (no reconnect). Comments (": ping") are skipped.
        Closing the generator (or leaving a for loop) closes the stream."""
        resp = self._request("GET", "/v1/jobs/%s/events" % _seg(job_id), accept="text/event-stream", idempotent=True)
        try:
            read1 = getattr(resp, "read1", None)
            read: Callable[[], bytes] = (lambda: read1(65536)) if callable(read1) else (lambda: resp.read(4096))
            for ev in parse_sse(read, self._max_event_bytes):
                try:
                    data = json.loads(ev.data)
                except ValueError as e:
                    raise ValueError("makerfleet: %s event: %s" % (ev.event, e)) from None
                yield JobEvent(ev.event, data)
        finally:
            resp.close()

    def wait_for_result(self, job_id: str, on_status: Optional[Callable[[JSON], None]] = None) -> JSON:
        """Follows the job's events until its report and returns it. A
        stream that ends without a report (the server stopped) reads the
        result instead: a 409 not-finished problem if the job has none yet."""
        events = self.events(job_id)
        try:
            for ev in events:
                if ev.event == "report":
                    return ev.data  # type: ignore[no-any-return]
                if ev.event == "status" and on_status is not None:
                    on_status(ev.data)
        finally:
            events.close()
        return self.get_result(job_id)

    # Batches.

    def create_batch(self, lines: Union[str, bytes, Iterable[BatchLine]], priority: Optional[int] = None,
                     window: Optional[int] = None, webhook: Optional[str] = None) -> JSON:
        """Submits a batch, one job per line: a JSONL text, or lines (job
        dicts or JSON texts) joined as JSONL. Invalid lines go to the
        batch's error file and the rest runs; a duplicate custom_id refuses
        the whole batch (422). webhook is a URL the batch's end (a
        batch.finished event) is POSTed to, signed. Not retried: a second
        call is a second batch."""
        if isinstance(lines, bytes):
            body = lines
        elif isinstance(lines, str):
            body = lines.encode("utf-8")
        else:
            out: List[str] = []
            for line in lines:
                s = line if isinstance(line, str) else json.dumps(line)
                if "\n" in s or "\r" in s:
                    raise ValueError("makerfleet: a batch line holds a line break")
                out.append(s)
            body = ("\n".join(out) + "\n").encode("utf-8")
        return self._json("POST", "/v1/batches", query={"priority": priority, "window": window, "webhook": webhook}, body=body,
                          content_type="application/jsonl", idempotent=False)

    def get_batch(self, batch_id: str) -> JSON:
        """The batch's state and counts."""
        return self._json("GET", "/v1/batches/" + _seg(batch_id))

    def list_batches(self) -> List[JSON]:
        """The tenant's batches, oldest first."""
        return self._json("GET", "/v1/batches").get("batches") or []

    def cancel_batch(self, batch_id: str) -> JSON:
        """Stops the batch: no more of its jobs start, its unfinished jobs are
        cancelled (an ended batch is 409)."""
        return self._json("POST", "/v1/batches/%s/cancel" % _seg(batch_id), body=b"{}", idempotent=True)

    def batch_output(self, batch_id: str) -> List[JSON]:
        """The batch's output: one line per input line, in input order, with
        custom_id and the report (response) or the error."""
        return _jsonl(self._text("/v1/batches/%s/output" % _seg(batch_id)))

    def batch_errors(self, batch_id: str) -> List[JSON]:
        """The batch's invalid lines, each with its line number and error."""
        return _jsonl(self._text("/v1/batches/%s/errors" % _seg(batch_id)))

    def wait_for_batch(self, batch_id: str, interval: float = 1.0) -> JSON:
        """Polls the batch every interval seconds until it has ended, and returns it."""
        while True:
            b = self.get_batch(batch_id)
            if b.get("state") in BATCH_ENDED:
                return b
            self._sleep(interval)

    # Tasks, usage, dead letters.

    def list_tasks(self, all_versions: bool = False) -> List[JSON]:
        """The tasks jobs may name (all_versions: every registered version of each spec)."""
        return self._json("GET", "/v1/tasks", query={"versions": "all" if all_versions else None}).get("tasks") or []

    def get_task(self, name: str, version: Optional[str] = None) -> JSON:
        """A task: a built-in, or a registered spec's versions and source (default its latest version)."""
        return self._json("GET", "/v1/tasks/" + _seg(name), query={"version": version})

    def usage(self) -> JSON:
        """The tenant's spend today, jobs by state, and quota."""
        return self._json("GET", "/v1/usage")

    def dead_letters(self, job: Optional[str] = None, limit: Optional[int] = None) -> List[JSON]:
        """The tenant's dead letters (of job, when given), oldest first."""
        return self._json("GET", "/v1/dlq", query={"job": job, "limit": limit}).get("dead_letters") or []

    # Webhooks.

    def get_webhook_secret(self) -> JSON:
        """The key's own tenant's webhook signing secret, an object with the
        tenant and the secret (it starts whsec_): pass the secret to
        verify_webhook. Each tenant has its
        own; a key never reads another's. A server that makes no deliveries
        answers 501."""
        return self._json("GET", "/v1/webhooks/secret")

    def list_webhook_deliveries(self, limit: Optional[int] = None) -> List[JSON]:
        """The tenant's webhook deliveries, newest first: each one's state
        (pending, delivered, failed) and attempts (limit: server default
        100, at most 1000)."""
        return self._json("GET", "/v1/webhooks/deliveries", query={"limit": limit}).get("deliveries") or []

    # Plumbing.

    def _json(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, body: Optional[bytes] = None,
              content_type: str = "application/json", idempotent: Optional[bool] = None) -> JSON:
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")
        resp = self._request(method, path, query=query, body=body, content_type=content_type, idempotent=idempotent)
        with resp:
            data = resp.read()
        try:
            return json.loads(data)  # type: ignore[no-any-return]
        except ValueError as e:
            raise ValueError("makerfleet: read %s %s answer: %s" % (method, path, e)) from None

    def _text(self, path: str) -> str:
        with self._request("GET", path, accept="application/jsonl", idempotent=True) as resp:
            return resp.read().decode("utf-8")

    def _request(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, body: Optional[bytes] = None,
                 content_type: str = "application/json", accept: str = "application/json",
                 idempotent: bool = False) -> Any:
        """Sends a request and returns a successful (2xx) answer; any other is
        raised as a MakerAPIError."""
        q: List[Tuple[str, str]] = [(k, str(v)) for k, v in (query or {}).items() if v is not None and v != ""]
        if self._tenant and (path.startswith("/v1/jobs") or path == "/v1/dlq"):
            q.append(("tenant", self._tenant))
        url = self.base_url + path + ("?" + urllib.parse.urlencode(q) if q else "")
        headers = {
            "Authorization": "Bearer " + self._key,
            "Accept": accept + ", application/problem+json",
            "User-Agent": self._ua,
        }
        if body is not None:
            headers["Content-Type"] = content_type
        attempt = 0
        while True:
            req = urllib.request.Request(url, data=body, headers=headers, method=method)
            try:
                return self._opener.open(req, timeout=self._timeout)
            except urllib.error.HTTPError as e:
                try:
                    err = problem_of(e.code, str(e.reason or ""), e.headers, e.read(1 << 20) if e.fp else b"")
                finally:
                    e.close()
            if idempotent and err.status in (429, 503) and attempt < self._max_retries:
                wait = float(err.retry_after) if err.retry_after is not None else min(0.5 * 2 ** attempt, self._max_retry_delay)
                if wait <= self._max_retry_delay:
                    self._sleep(wait)
                    attempt += 1
                    continue
            raise err


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _jsonl(text: str) -> List[JSON]:
    return [json.loads(line) for line in text.split("\n") if line.strip()]
