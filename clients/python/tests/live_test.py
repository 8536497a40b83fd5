"""Checks the client against a live maker serve (run by
clients/clients_test.go, which starts the fleet, the server and a key):
MAKER_API_URL, MAKER_API_KEY, MAKER_JOB_PREFIX, MAKER_WEBHOOK_FIXTURE (a
delivery signed by the Go test, with its secret), MAKER_WEBHOOK_URL (the Go
test's receiver) and MAKER_WEBHOOK_DIR (where it writes each delivery it gets)
come from the environment.
It exits non-zero on the first failed check and prints, last, one JSON line
of what it saw for the Go test to compare."""

from __future__ import annotations

import base64
import email.message
import io
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List

from makerfleet import (
    PROBLEM_BASE,
    MakerAPIError,
    MakerClient,
    WebhookVerificationError,
    parse_sse,
    sign_webhook,
    verify_webhook,
)


def env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise SystemExit("%s is not set" % name)
    return v


def problem(call: Callable[[], Any]) -> MakerAPIError:
    try:
        call()
    except MakerAPIError as e:
        return e
    raise AssertionError("the call succeeded; want a problem")


def rejected(call: Callable[[], Any], why: str) -> None:
    try:
        call()
    except WebhookVerificationError as e:
        assert why in str(e), "refused for %r, want %r" % (str(e), why)
        return
    raise AssertionError("verify_webhook accepted a delivery it must refuse (%s)" % why)


def received(hook_dir: str, n: int) -> List[Dict[str, Any]]:
    """Polls hook_dir (every 100 ms, at most 30 s) until the receiver has
    written n deliveries, and reads them: headers and the raw body."""
    deadline = time.monotonic() + 30
    while True:
        names = sorted(f for f in os.listdir(hook_dir) if f.endswith(".json"))
        if len(names) >= n:
            out = []
            for f in names:
                with open(os.path.join(hook_dir, f), encoding="utf-8") as fh:
                    d = json.load(fh)
                out.append({"headers": d["headers"], "body": base64.b64decode(d["body"])})
            return out
        if time.monotonic() > deadline:
            raise AssertionError("%d deliveries in %s after 30 s, want %d" % (len(names), hook_dir, n))
        time.sleep(0.1)


def main() -> None:
    base, key, prefix = env("MAKER_API_URL"), env("MAKER_API_KEY"), env("MAKER_JOB_PREFIX")
    fx = json.loads(env("MAKER_WEBHOOK_FIXTURE"))
    hook_url, hook_dir = env("MAKER_WEBHOOK_URL"), env("MAKER_WEBHOOK_DIR")
    seen: Dict[str, Any] = {}
    c = MakerClient(base, key)

    # Submit (idempotent by job_id) and follow the events to the report.
    jid = prefix + "-hanoi"
    created = c.submit_job({"task": "hanoi", "params": {"disks": 3}, "k": 1, "job_id": jid})
    assert created["id"] == jid and created["duplicate"] is False, created
    again = c.submit_job({"task": "hanoi", "params": {"disks": 3}, "k": 1, "job_id": jid})
    assert again["duplicate"] is True, "a resubmit under the same job_id is a duplicate"
    statuses: List[Dict[str, Any]] = []
    report = None
    after = 0
    for ev in c.events(jid):
        if report is not None:
            after += 1
        if ev.event == "status":
            statuses.append(ev.data)
        elif ev.event == "report":
            report = ev.data
    assert report is not None, "the event stream ended without a report"
    assert after == 0, "events after the report"
    assert statuses and statuses[0]["job_id"] == jid, statuses
    assert report["job_id"] == jid and report["solved"] is True, report
    assert report["steps"] == 7, "3 disks take 7 moves"
    assert c.wait_for_result(jid, on_status=lambda s: None) == report, "wait_for_result gives the stream's report"
    assert c.get_result(jid) == report
    assert c.get_job(jid)["state"] == "solved"
    seen["report"] = {k: report[k] for k in ("job_id", "tenant", "solved", "steps")}
    seen["status_events"] = len(statuses)

    # Paging: two jobs, a page of one each.
    jid2 = prefix + "-second"
    c.submit_job({"task": "hanoi", "params": {"disks": 2}, "k": 1, "job_id": jid2})
    assert c.wait_for_result(jid2)["steps"] == 3
    page = c.list_jobs(limit=1)
    assert len(page["jobs"]) == 1 and page.get("next_cursor"), page
    listed = [j["id"] for j in c.iter_jobs(state="solved", limit=1)]
    assert jid in listed and jid2 in listed, listed
    seen["listed"] = sorted(j for j in listed if j.startswith(prefix))

    # Problems: unknown job (404), bad query (400), invalid job (422), taken id (409).
    p = problem(lambda: c.pause(prefix + "-nope"))
    assert (p.status, p.type, p.kind, p.title) == (404, PROBLEM_BASE + "not-found", "not-found", "Not found"), p.problem
    assert p.instance == "/v1/jobs/%s-nope/pause" % prefix, p.instance
    for call in (c.resume, c.cancel, c.get_result, c.get_job):
        assert problem(lambda: call(prefix + "-nope")).status == 404
    p = problem(lambda: c.list_jobs(state="bogus"))
    assert p.status == 400 and p.kind == "bad-request" and "bogus" in (p.detail or ""), p.problem
    p = problem(lambda: c.submit_job({"task": "hanoi", "params": {"disks": 0}, "k": 1}))
    assert p.status == 422 and p.kind == "invalid-request", p.problem
    assert p.errors and p.errors[0]["path"] == "/params/disks", p.errors
    seen["invalid_path"] = p.errors[0]["path"]
    assert problem(lambda: c.submit_job({"task": "hanoi", "params": {"disks": 4}, "k": 1, "job_id": jid})).status == 409

    # Controls on a running job: pause, resume, cancel, and its report says cancelled.
    long_id = prefix + "-long"
    c.submit_job({"task": "hanoi", "params": {"disks": 16}, "k": 1, "job_id": long_id})
    assert c.pause(long_id)["control"] == "pause"
    assert c.resume(long_id)["control"] == "run"
    assert c.cancel(long_id)["control"] == "cancel"
    assert c.wait_for_result(long_id)["solved"] is False
    seen["cancelled_state"] = c.get_job(long_id)["state"]
    assert seen["cancelled_state"] == "cancelled", seen

    # Budget: read, and a finished job's is not set (409 finished).
    assert c.get_budget(jid)["id"] == jid
    p = problem(lambda: c.set_budget(jid, 5))
    assert p.status == 409 and p.kind == "finished", p.problem

    # Batches: two good lines and an invalid one; the batch names the
    # receiver as its webhook (checked below).
    batch = c.create_batch([
        {"custom_id": "first", "task": "hanoi", "params": {"disks": 2}, "k": 1},
        {"custom_id": "broken", "task": "hanoi", "params": {"disks": 0}, "k": 1},
        '{"custom_id": "third", "task": "hanoi", "params": {"disks": 3}, "k": 1}',
    ], webhook=hook_url)
    assert batch["counts"]["total"] == 3, batch
    done = c.wait_for_batch(batch["id"], interval=0.1)
    assert done["state"] == "completed" and done["counts"]["completed"] == 2 and done["counts"]["failed"] == 1, done
    out = c.batch_output(batch["id"])
    assert [l["custom_id"] for l in out] == ["first", "broken", "third"], out
    assert out[0]["response"]["steps"] == 3 and out[2]["response"]["steps"] == 7 and out[1]["error"], out
    errs = c.batch_errors(batch["id"])
    assert [(l["custom_id"], l["line"]) for l in errs] == [("broken", 2)], errs
    assert any(b["id"] == batch["id"] for b in c.list_batches())
    assert c.get_batch(batch["id"])["state"] == "completed"
    assert problem(lambda: c.cancel_batch(batch["id"])).status == 409, "an ended batch is not cancelled"
    assert problem(lambda: c.get_batch("nope")).status == 404
    seen["batch"] = {"id": batch["id"], "state": done["state"], "counts": done["counts"],
                     "output": [l["custom_id"] for l in out]}

    # Tasks, usage, dead letters.
    assert any(t["name"] == "hanoi" for t in c.list_tasks())
    assert c.get_task("hanoi")["name"] == "hanoi"
    assert problem(lambda: c.get_task("no-such-task")).status == 404
    usage = c.usage()
    assert (usage.get("jobs") or {}).get("solved", 0) >= 2, usage
    assert isinstance(c.dead_letters(limit=5), list)

    # A key the server does not know: 401.
    p = problem(lambda: MakerClient(base, "mk_000000000000_" + "x" * 43).list_jobs())
    assert p.status == 401 and p.kind == "unauthorized", p.problem
    seen["unauthorized"] = p.status

    # Retry-After: an idempotent call answered 429 is tried again; a batch is not.
    calls = [0]
    real = urllib.request.build_opener()

    class Flaky:
        def open(self, req: urllib.request.Request, timeout: float = 0) -> Any:
            calls[0] += 1
            if calls[0] == 1:
                h = email.message.Message()
                h["Content-Type"] = "application/problem+json"
                h["Retry-After"] = "1"
                body = json.dumps({"type": PROBLEM_BASE + "rate-limited", "title": "Too many requests", "status": 429})
                raise urllib.error.HTTPError(req.full_url, 429, "Too Many Requests", h, io.BytesIO(body.encode()))
            return real.open(req, timeout=timeout)

    retrying = MakerClient(base, key, opener=Flaky())  # type: ignore[arg-type]
    t0 = time.monotonic()
    assert retrying.get_job(jid)["id"] == jid
    assert calls[0] == 2 and time.monotonic() - t0 >= 0.9, "the retry waited for Retry-After"
    calls[0] = 0
    p = problem(lambda: retrying.create_batch([{"custom_id": "x", "task": "hanoi", "params": {"disks": 2}, "k": 1}]))
    assert p.status == 429 and p.retry_after == 1 and calls[0] == 1, "a batch is not retried"
    calls[0] = 0
    assert problem(lambda: MakerClient(base, key, opener=Flaky(), max_retries=0).get_job(jid)).status == 429  # type: ignore[arg-type]

    # The event parser: comments, CRLF and CR line ends, events split across chunks.
    chunks = [b": ping\n\n", b"event: status\r\ndata: {\"a\"", b":1}\r\n\r\n: ping\r",
              b"\nevent: report\rdata: [1,\ndata: 2]\r\r", b"data: dropped"]
    it = iter(chunks)
    parsed = [(e.event, e.data) for e in parse_sse(lambda: next(it, b""))]
    assert parsed == [("status", '{"a":1}'), ("report", "[1,\n2]")], parsed

    # Webhooks: the Go test's delivery, and tampered ones.
    def hdrs(ts: int, sig: str) -> Dict[str, str]:
        return {"webhook-id": fx["id"], "webhook-timestamp": str(ts), "webhook-signature": sig}

    payload = verify_webhook(fx["secret"], hdrs(fx["timestamp"], fx["signature"]), fx["body"])
    assert payload == json.loads(fx["body"])
    msg = email.message.Message()
    for k, v in hdrs(fx["timestamp"], "v1,bm90IGl0 " + fx["signature"]).items():
        msg[k] = v
    assert verify_webhook(fx["secret"], msg, fx["body"].encode()) == payload
    assert sign_webhook(fx["secret"], fx["id"], fx["timestamp"], fx["body"]) == fx["signature"]
    rejected(lambda: verify_webhook(fx["secret"], hdrs(fx["timestamp"], fx["signature"]), fx["body"].replace("}", ',"x":1}', 1)), "signature")
    rejected(lambda: verify_webhook(fx["secret"], hdrs(fx["old_timestamp"], fx["old_signature"]), fx["body"]), "too old")
    rejected(lambda: verify_webhook(fx["secret"], hdrs(fx["timestamp"] + 3600, fx["signature"]), fx["body"]), "future")
    other = "whsec_" + base64.b64encode(b"another secret").decode()
    rejected(lambda: verify_webhook(other, hdrs(fx["timestamp"], fx["signature"]), fx["body"]), "signature")
    rejected(lambda: verify_webhook(fx["secret"], hdrs(fx["timestamp"], fx["signature"].replace("v1,", "v2,")), fx["body"]), "signature")
    rejected(lambda: verify_webhook(fx["secret"], {"webhook-id": fx["id"]}, fx["body"]), "missing")
    # The old delivery passes with a tolerance that covers it: only its age was wrong.
    assert verify_webhook(fx["secret"], hdrs(fx["old_timestamp"], fx["old_signature"]), fx["body"], tolerance_seconds=7200) == payload
    seen["webhook"] = "ok"

    # Real deliveries: a job naming the receiver (and the batch above); each
    # delivery the receiver got is verified with the secret fetched here.
    secret = c.get_webhook_secret()
    assert secret["tenant"] == report["tenant"], secret["tenant"]
    assert secret["secret"].startswith("whsec_"), "not a whsec_ secret"
    p = problem(lambda: c.submit_job({"task": "hanoi", "params": {"disks": 2}, "k": 1, "webhook": "ftp://example.com/hook"}))
    assert p.status == 422 and p.errors and p.errors[0]["path"] == "/webhook", p.problem
    hook_job = prefix + "-hook"
    c.submit_job({"task": "hanoi", "params": {"disks": 2}, "k": 1, "job_id": hook_job, "webhook": hook_url})
    assert c.wait_for_result(hook_job)["steps"] == 3
    events: Dict[str, Any] = {}
    for d in received(hook_dir, 2):
        ev = verify_webhook(secret["secret"], d["headers"], d["body"])
        assert ev["data"]["tenant"] == report["tenant"], ev
        events[d["headers"]["webhook-id"][0]] = ev
        # The same delivery with a byte more, or under another tenant's secret, is refused.
        rejected(lambda: verify_webhook(secret["secret"], d["headers"], d["body"] + b" "), "signature")
        rejected(lambda: verify_webhook(fx["secret"], d["headers"], d["body"]), "signature")
    by_type = {ev["type"]: (i, ev) for i, ev in events.items()}
    assert set(by_type) == {"job.finished", "batch.finished"}, events
    job_hook_id, job_ev = by_type["job.finished"]
    assert job_ev["data"]["job_id"] == hook_job and job_ev["data"]["state"] == "solved", job_ev
    assert job_ev["data"]["report"]["steps"] == 3 and job_ev["data"]["links"]["self"] == "/v1/jobs/" + hook_job, job_ev
    batch_ev = by_type["batch.finished"][1]
    assert batch_ev["data"]["batch_id"] == batch["id"] and batch_ev["data"]["state"] == "completed", batch_ev
    assert batch_ev["data"]["counts"] == done["counts"], batch_ev
    # The deliveries list says delivered (the receiver answered before the
    # server recorded it: poll, bounded).
    deadline = time.monotonic() + 30
    while True:
        listed = {d["id"]: d for d in c.list_webhook_deliveries(limit=10)}
        mine = [listed.get(i) or {} for i in events]
        if all(d.get("state") == "delivered" for d in mine):
            break
        assert time.monotonic() < deadline, "deliveries not delivered after 30 s: %r" % mine
        time.sleep(0.1)
    for d in mine:
        assert len(d["attempts"]) == 1 and d["attempts"][0]["status_code"] == 204 and d["url"] == hook_url, d
    seen["delivered"] = {d["id"]: {"type": d["type"], "job_id": d.get("job_id", ""), "batch_id": d.get("batch_id", ""),
                                   "state": d["state"]} for d in mine}
    assert len(c.list_webhook_deliveries(limit=1)) == 1
    assert problem(lambda: c.list_webhook_deliveries(limit=0)).status == 400
    hook_view = c.get_job(hook_job)
    assert hook_view["webhook"]["state"] == "delivered" and hook_view["webhook"]["id"] == job_hook_id, hook_view
    assert c.get_batch(batch["id"])["webhook_delivery"]["state"] == "delivered"

    print(json.dumps(dict(ok=True, **seen)))


if __name__ == "__main__":
    main()
