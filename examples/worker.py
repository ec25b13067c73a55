#!/usr/bin/env python3
"""A remote a2 worker in Python, with the standard library only.

It claims events over `a2 serve`'s work API, processes them, and completes
each attempt with the events it produced, or fails it (the server retries
it, then dead-letters it after --max-failures). While a handler runs, a
thread renews the leases; another listens to the server's cancels
(`GET /v1/work/cancellations`) and tells the handler of a cancelled event to
stop, as a renewal that finds the attempt superseded does too; on
SIGINT/SIGTERM the worker releases what it holds so another worker can take
it at once. Every --report-secs it says what it did, when it did anything.

Run `a2 serve` and append a few events:

    a2 serve --store memory &
    curl -s localhost:7373/v1/sessions/demo/events -H 'content-type: application/json' \\
      -d '{"events": [{"type": "text", "payload": {"text": "hello"}}]}'
    python3 examples/worker.py --url http://127.0.0.1:7373 --exit-when-idle

The handler here upper-cases `text` events into `text.upper` events, fails
events whose payload says {"fail": true} and first waits `sleep_ms` when the
payload names it (stopping early when the event is cancelled): replace
`handle` with your own work.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request


class ApiError(Exception):
    """An error answer of the server: {"error": {"code", "message"}}."""

    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


class Client:
    """The work API of one a2 server."""

    def __init__(self, url, token=None, timeout=30):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("content-type", "application/json")
        if self.token:
            request.add_header("authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read())["error"]
            except (ValueError, KeyError):
                error = {"code": "Http", "message": e.reason}
            raise ApiError(e.code, error["code"], error["message"]) from None

    def claim(self, holder, ttl_ms, limit):
        return self.call("POST", "/v1/work/claim", {"holder": holder, "ttl_ms": ttl_ms, "limit": limit})

    def renew(self, session, holder, claims, ttl_ms):
        return self.call("POST", "/v1/work/renew", {"session": session, "holder": holder, "claims": claims, "ttl_ms": ttl_ms})

    def complete(self, session, index, attempt, events):
        return self.call("POST", "/v1/work/complete", {"session": session, "index": index, "attempt": attempt, "events": events})

    def fail(self, session, index, attempt, error, max_failures, retry_after_ms):
        return self.call("POST", "/v1/work/fail", {
            "session": session, "index": index, "attempt": attempt, "error": error,
            "max_failures": max_failures, "retry_after_ms": retry_after_ms,
        })

    def release(self, session, holder, claims):
        return self.call("POST", "/v1/work/release", {"session": session, "holder": holder, "claims": claims})


def handle(event, cancelled):
    """Processes one event; returns the events it produces. Raising fails the attempt.

    `cancelled` is a threading.Event set when the event is cancelled (or its
    lease lost): a long handler checks it and returns early. What it returns
    then is dropped; nothing of a cancelled attempt is recorded.
    """
    payload = event["payload"] if isinstance(event["payload"], dict) else {}
    if payload.get("sleep_ms") and cancelled.wait(payload["sleep_ms"] / 1000):
        return []
    if payload.get("fail"):
        raise RuntimeError(f"event {event['index']} asked to fail")
    if event["type"] == "text":
        # An id derived from the event and its attempt makes a repeated
        # completion a replay, never a duplicate (the server's CO3).
        return [{
            "id": f"{event['id']}.upper.{event['attempt_count']}",
            "type": "text.upper",
            "payload": {"text": str(payload.get("text", "")).upper()},
            "settled": True,
        }]
    return []


class Worker:
    def __init__(self, client, holder, ttl_ms, max_failures, retry_after_ms, limit):
        self.client = client
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.max_failures = max_failures
        self.retry_after_ms = retry_after_ms
        self.limit = limit
        self.stopping = threading.Event()
        self.held = {}  # (session, index) -> attempt
        # (session, index) -> (attempt, threading.Event set to stop its handler)
        self.running = {}
        # (session, index, attempt) cancelled before its handler started
        self.dropped = set()
        self.lock = threading.Lock()
        self.stats = {"claimed": 0, "completed": 0, "failed": 0, "dead_lettered": 0, "released": 0,
                      "cancelled": 0}
        self.exit_code = 0
        # Set once the cancel stream is open: the server opens it live, so
        # no cancel of what this worker claims afterwards is missed.
        self.cancels_live = threading.Event()

    def stop_handler(self, session, index, attempt, why):
        """Tells the handler running `attempt` of `session` #`index` to stop;
        one claimed but not started yet never starts."""
        with self.lock:
            running = self.running.get((session, index))
            if running is None and self.held.get((session, index)) == attempt:
                self.dropped.add((session, index, attempt))
        if running and running[0] == attempt and not running[1].is_set():
            print(f"worker {self.holder}: {session} #{index} {why}; stopping its handler", file=sys.stderr)
            running[1].set()

    def renew_loop(self):
        """Renews every held lease at a third of its ttl; an attempt found
        superseded (cancelled, or taken over) is stopped."""
        while not self.stopping.wait(self.ttl_ms / 3000):
            with self.lock:
                by_session = {}
                for (session, index), attempt in self.held.items():
                    by_session.setdefault(session, []).append({"index": index, "attempt": attempt})
            for session, claims in by_session.items():
                try:
                    answer = self.client.renew(session, self.holder, claims, self.ttl_ms)
                except (ApiError, OSError) as e:
                    print(f"worker {self.holder}: renew failed: {e}", file=sys.stderr)
                    continue
                attempts = {claim["index"]: claim["attempt"] for claim in claims}
                for index in answer.get("superseded", []):
                    self.stop_handler(session, index, attempts[index], "was superseded")

    def cancel_loop(self, poll_s):
        """Follows the server's cancels (Server-Sent Events) and stops the
        handlers of cancelled attempts; opens the stream again after it
        broke."""
        told = False
        while not self.stopping.is_set():
            request = urllib.request.Request(self.client.url + "/v1/work/cancellations")
            request.add_header("accept", "text/event-stream")
            if self.client.token:
                request.add_header("authorization", "Bearer " + self.client.token)
            try:
                # Keep-alive comments come every 15 s: a minute of silence
                # is a dead connection.
                with urllib.request.urlopen(request, timeout=60) as response:
                    self.cancels_live.set()
                    told = False
                    kind, data = None, []
                    for raw in response:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if line.startswith("event:"):
                            kind = line[6:].strip()
                        elif line.startswith("data:"):
                            data.append(line[5:].strip())
                        elif line == "":
                            if kind == "cancel" and data:
                                cancel = json.loads("\n".join(data))
                                self.stop_handler(cancel["session"], cancel["index"], cancel["attempt"],
                                                  "was cancelled")
                            kind, data = None, []
            except (OSError, ValueError) as e:
                if not told and not self.stopping.is_set():
                    print(f"worker {self.holder}: the cancel stream broke ({e}); renewals find cancels "
                          f"until it is back", file=sys.stderr)
                    told = True
            self.cancels_live.set()
            self.stopping.wait(poll_s)

    def report_loop(self, every_s):
        """Every `every_s`, one line of what the worker did since the last
        one (nothing while it does nothing)."""
        keys = ("completed", "failed", "dead_lettered", "cancelled")
        last = {k: 0 for k in keys}
        while not self.stopping.wait(every_s):
            now = {k: self.stats[k] for k in keys}
            done = {k: now[k] - last[k] for k in keys}
            if any(done.values()):
                print(f"worker {self.holder}: last {every_s:g} s: {done['completed']} completed, "
                      f"{done['failed']} failed (to be retried), {done['dead_lettered']} dead-lettered, "
                      f"{done['cancelled']} cancelled", file=sys.stderr)
            last = now

    def run_one(self, session, event):
        index, attempt = event["index"], event["attempt_count"]
        cancelled = threading.Event()
        with self.lock:
            if (session, index, attempt) in self.dropped:
                self.dropped.discard((session, index, attempt))
                self.held.pop((session, index), None)
                self.stats["cancelled"] += 1
                return
            self.running[(session, index)] = (attempt, cancelled)
        try:
            produced = handle(event, cancelled)
            if cancelled.is_set():
                # CN2: nothing of a cancelled attempt is recorded (the
                # server would answer `superseded`).
                self.stats["cancelled"] += 1
                return
        except Exception as e:  # a handler's failure, whatever it is
            if cancelled.is_set():
                self.stats["cancelled"] += 1
                return
            outcome = self.client.fail(session, index, attempt, str(e), self.max_failures, self.retry_after_ms)
            kind = outcome["outcome"]
            if kind in ("failed", "dead_lettered"):
                self.stats["failed"] += 1
            if kind == "dead_lettered":
                self.stats["dead_lettered"] += 1
                print(f"worker {self.holder}: {session} #{index} dead-lettered after attempt {attempt}: {e}",
                      file=sys.stderr)
            elif kind == "failed":
                print(f"worker {self.holder}: {session} #{index} attempt {attempt} failed, to be retried: {e}",
                      file=sys.stderr)
        else:
            try:
                outcome = self.client.complete(session, index, attempt, produced)
            except ApiError as e:
                if e.code != "SessionClosed" or not produced:
                    raise
                # The session was closed while the handler ran: its log takes
                # no more events, so the event settles without them.
                print(f"worker {self.holder}: {session} was closed; dropping the {len(produced)} "
                      f"events #{index} returned", file=sys.stderr)
                outcome = self.client.complete(session, index, attempt, [])
            if outcome["outcome"] == "completed":
                self.stats["completed"] += 1
        finally:
            with self.lock:
                self.held.pop((session, index), None)
                self.running.pop((session, index), None)

    def run(self, exit_when_idle, poll_s, report_s):
        threading.Thread(target=self.renew_loop, daemon=True).start()
        threading.Thread(target=self.cancel_loop, args=(poll_s,), daemon=True).start()
        threading.Thread(target=self.report_loop, args=(report_s,), daemon=True).start()
        # Claims wait until cancels are heard (a few seconds at most).
        self.cancels_live.wait(5)
        print(f"worker {self.holder}: working for {self.client.url}", file=sys.stderr)
        unreachable = False
        while not self.stopping.is_set():
            try:
                answer = self.client.claim(self.holder, self.ttl_ms, self.limit)
            except ApiError as e:
                if e.status in (401, 403):
                    # Retrying cannot help: the token is missing, wrong, or
                    # lacks the work scope.
                    print(f"worker {self.holder}: {self.client.url} refused this worker ({e}); "
                          "give a token with the work scope (--token or A2_TOKEN)", file=sys.stderr)
                    self.exit_code = 2
                    break
                print(f"worker {self.holder}: claim failed: {e}", file=sys.stderr)
                self.stopping.wait(poll_s)
                continue
            except OSError as e:
                # Told once per outage, not at every poll.
                if not unreachable:
                    print(f"worker {self.holder}: cannot reach {self.client.url} ({e}); "
                          f"trying again every {poll_s:g} s", file=sys.stderr)
                    unreachable = True
                self.stopping.wait(poll_s)
                continue
            if unreachable:
                print(f"worker {self.holder}: {self.client.url} answers again", file=sys.stderr)
                unreachable = False
            if answer["outcome"] == "claimed":
                session = answer["session"]
                with self.lock:
                    for event in answer["events"]:
                        self.held[(session, event["index"])] = event["attempt_count"]
                self.stats["claimed"] += len(answer["events"])
                for event in answer["events"]:
                    if self.stopping.is_set():
                        break
                    self.run_one(session, event)
                continue
            if answer["outcome"] == "settled" and exit_when_idle:
                break
            # Busy (leased elsewhere, or a retry waiting) or idle: wait a little.
            self.stopping.wait(poll_s)
        self.stopping.set()
        self.release_all()

    def release_all(self):
        with self.lock:
            by_session = {}
            for (session, index), attempt in self.held.items():
                by_session.setdefault(session, []).append({"index": index, "attempt": attempt})
            self.held.clear()
        for session, claims in by_session.items():
            try:
                released = self.client.release(session, self.holder, claims)["released"]
                self.stats["released"] += len(released)
            except (ApiError, OSError) as e:
                print(f"worker {self.holder}: release failed: {e}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description="An a2 worker over HTTP (Python standard library only).")
    parser.add_argument("--url", default=os.environ.get("A2_URL", "http://127.0.0.1:7373"))
    parser.add_argument("--token", default=os.environ.get("A2_TOKEN"), help="a bearer token with the work scope")
    parser.add_argument("--holder", default=f"py-{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--ttl-ms", type=int, default=30_000)
    parser.add_argument("--limit", type=int, default=8, help="events per claim")
    parser.add_argument("--max-failures", type=int, default=3)
    parser.add_argument("--retry-after-ms", type=int, default=0)
    parser.add_argument("--poll-ms", type=int, default=200)
    parser.add_argument("--exit-when-idle", action="store_true", help="stop once nothing is pending")
    parser.add_argument("--report-secs", type=float, default=10,
                        help="say what it did every so often (when it did anything)")
    args = parser.parse_args()

    worker = Worker(Client(args.url, args.token), args.holder, args.ttl_ms, args.max_failures,
                    args.retry_after_ms, args.limit)

    def stop(signum, _frame):
        print(f"worker {args.holder}: signal {signum}, stopping", file=sys.stderr)
        worker.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker.run(args.exit_when_idle, args.poll_ms / 1000, args.report_secs)
    print(f"worker {args.holder} stopped: " + ", ".join(f"{k} {v}" for k, v in worker.stats.items()))
    sys.exit(worker.exit_code)


if __name__ == "__main__":
    main()
