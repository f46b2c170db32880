"""No answer: a server that never replies, one that is not there, a proxy's
page; and the fail modes that decide then."""

from __future__ import annotations

import socket
import threading
import time
import unittest
from typing import Any, Callable, List

from _server import ADMIN_KEY, Server

import sluice
from sluice import InlineCheck, Policy
from sluice.models import RateLimitHeaders, parse_time

NAMED = dict(endpoint="chat", tenant="acme", key={"user": "u-f"})
INLINE = dict(
    tenant="acme",
    checks=[
        InlineCheck(Policy("py-open", "fixed_window", 5, window="1s"), key="k"),
        InlineCheck(Policy("py-closed", "fixed_window", 5, window="1s", fail_mode="closed"), key="k"),
    ],
)

# Nothing listens on port 1 of loopback: connecting is refused.
DOWN = "http://127.0.0.1:1"


class Listener:
    """A loopback server that hands each connection it accepts to
    handle, on a thread of its own, until close."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:{}".format(self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        _stop(self.sock)
        self._thread.join(10)


class Silent(Listener):
    """A socket that accepts connections and never answers them."""

    def __init__(self) -> None:
        self.accepted: List[socket.socket] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        self.accepted.append(conn)

    def close(self) -> None:
        super().close()
        for c in self.accepted:
            c.close()


class Proxy(Listener):
    """A server answering every request with one canned HTTP answer."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(self.answer)
            except OSError:
                pass


def _stop(sock: socket.socket) -> None:
    """Closes a listening socket, waking its accept (close alone does not on Linux)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def http_answer(status: str, body: str, content_type: str, extra: str = "") -> bytes:
    b = body.encode()
    head = "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n".format(status, content_type, len(b), extra)
    return head.encode() + b


def bounded(test: unittest.TestCase, call: Callable[[], Any], bound: float = 30) -> Any:
    """call() in a thread, failing the test rather than hanging if it has
    not returned or raised within bound seconds (a timeout not honoured);
    its result, or the exception it raised."""
    out: List[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as err:  # handed to the test
            out.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    if t.is_alive():
        test.fail("no answer and no timeout within {}s".format(bound))
    return out[0]


class TimeoutTest(unittest.TestCase):
    def setUp(self) -> None:
        self.silent = Silent()
        self.addCleanup(self.silent.close)

    def test_a_silent_server_times_out(self) -> None:
        client = sluice.Client(self.silent.url, ADMIN_KEY, timeout=0.3)
        self.addCleanup(client.close)
        start = time.monotonic()
        err = bounded(self, lambda: client.check(**NAMED))  # type: ignore[arg-type]
        # Not before its time (a lower bound holds on a busy machine).
        self.assertGreaterEqual(time.monotonic() - start, 0.25)
        self.assertIsInstance(err, sluice.Timeout)
        self.assertIsInstance(err, TimeoutError)
        self.assertIsInstance(err, sluice.SluiceError)
        self.assertEqual((err.status, err.code), (0, "timeout"))
        self.assertIsNotNone(err.__cause__)

        # A call's own timeout overrides the client's.
        start = time.monotonic()
        self.assertIsInstance(bounded(self, lambda: client.acquire_lease("jobs", tenant="acme", timeout=0.6)), sluice.Timeout)
        self.assertGreaterEqual(time.monotonic() - start, 0.55)

    def test_a_silent_server_fails_open_or_closed(self) -> None:
        with sluice.Client(self.silent.url, timeout=0.2, fail_mode="open") as c:
            r = bounded(self, lambda: c.check(**NAMED))  # type: ignore[arg-type]
        self.assertIsInstance(r, sluice.CheckResult)
        self.assertTrue(r.allowed)
        self.assertTrue(r.failed_open)
        self.assertEqual(r.status, 0)
        with sluice.Client(self.silent.url, timeout=0.2, fail_mode="closed") as c:
            r = bounded(self, lambda: c.check(**NAMED))  # type: ignore[arg-type]
        self.assertIsInstance(r, sluice.CheckResult)
        self.assertFalse(r.allowed)
        self.assertTrue(r.failed_closed)
        self.assertEqual(r.retry_after, 1.0)

    def test_acquire_waits_timeout_plus_max_wait(self) -> None:
        with sluice.Client(self.silent.url, timeout=0.2) as c:
            start = time.monotonic()
            err = bounded(self, lambda: c.acquire("partner-api", tenant="acme", key="k", max_wait="300ms"))
            self.assertIsInstance(err, sluice.Timeout)
            self.assertGreaterEqual(time.monotonic() - start, 0.45)


class NoAnswerTest(unittest.TestCase):
    def test_refused_connection_is_connection_failed(self) -> None:
        with sluice.Client(DOWN, ADMIN_KEY) as c:
            with self.assertRaises(sluice.ConnectionFailed) as cm:
                c.check(**NAMED)  # type: ignore[arg-type]
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertEqual((cm.exception.status, cm.exception.code), (0, "network"))
        self.assertIsInstance(cm.exception.__cause__, OSError)

    def test_fail_modes_when_nothing_answers(self) -> None:
        with sluice.Client(DOWN, fail_mode="open") as c:
            opened = c.check(**NAMED)  # type: ignore[arg-type]
            # Inline policies decide by their own mode, whatever the client's.
            mixed = c.check(**INLINE)  # type: ignore[arg-type]
        self.assertTrue(opened.allowed and opened.failed_open)
        self.assertEqual(opened.policy, "chat")
        self.assertFalse(mixed.allowed)
        self.assertEqual([(d.policy, d.allowed) for d in mixed.decisions], [("py-open", True), ("py-closed", False)])
        self.assertEqual(mixed.violated_policies, ("py-closed",))

        with sluice.Client(DOWN, fail_mode="closed") as c:
            closed = c.check(**NAMED)  # type: ignore[arg-type]
        self.assertFalse(closed.allowed)
        self.assertTrue(closed.failed_closed)
        self.assertEqual(closed.violated_policies, ("chat",))

        with self.assertRaises(ValueError):
            sluice.Client(DOWN, fail_mode="ajar")

    def test_a_proxys_page_is_no_decision_sluices_503_is_failed_closed(self) -> None:
        page = Proxy(http_answer("502 Bad Gateway", "<html>bad gateway</html>", "text/html"))
        self.addCleanup(page.close)
        with sluice.Client(page.url, fail_mode="open") as c:
            r = c.check(**NAMED)  # type: ignore[arg-type]
        self.assertTrue(r.allowed and r.failed_open)
        self.assertEqual(r.status, 502)
        with sluice.Client(page.url) as c:
            with self.assertRaises(sluice.Unavailable) as cm:
                c.check(**NAMED)  # type: ignore[arg-type]
        self.assertEqual(cm.exception.status, 502)
        self.assertEqual(cm.exception.body, {})

        own = Proxy(http_answer("503 Service Unavailable", '{"error":"unavailable","message":"store failed"}', "application/json", "Retry-After: 1\r\n"))
        self.addCleanup(own.close)
        with sluice.Client(own.url, fail_mode="open") as c:
            r = c.check(**NAMED)  # type: ignore[arg-type]
        self.assertFalse(r.allowed)
        self.assertTrue(r.failed_closed)
        with sluice.Client(own.url) as c:
            with self.assertRaises(sluice.Unavailable) as cm:
                c.check(**NAMED)  # type: ignore[arg-type]
        self.assertEqual(cm.exception.retry_after, 1.0)
        self.assertEqual(cm.exception.message, "store failed")

    def test_a_429_that_is_no_decision_raises(self) -> None:
        p = Proxy(http_answer("429 Too Many Requests", '{"error":"exhausted","message":"no room"}', "application/json", "Retry-After: 2\r\n"))
        self.addCleanup(p.close)
        with sluice.Client(p.url, fail_mode="open") as c:
            with self.assertRaises(sluice.SluiceError) as cm:
                c.check(**NAMED)  # type: ignore[arg-type]
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.retry_after), (429, "exhausted", 2.0))


DECISION = '{"allowed":true,"policy":"p","limit":5,"remaining":4,"resetAt":1,"retryAfter":0,"retryAfterMs":0,"decisions":[]}'


class KeptConnection:
    """A server whose first connection answers one request, kept alive, then
    reads the next and closes without a word (as a server closing an idle
    connection just as a request goes out); later connections answer."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:{}".format(self.sock.getsockname()[1])
        self.connections = 0
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            first = self.connections == 1
            with conn:
                conn.settimeout(10)
                try:
                    for n in range(2 if first else 1):
                        if not self._read_request(conn):
                            break
                        self.requests += 1
                        if first and n == 1:
                            break  # read, then closed unanswered
                        body = DECISION.encode()
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                except OSError:
                    pass

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(rest) < length:
            rest += conn.recv(65536)
        return True

    def close(self) -> None:
        _stop(self.sock)
        self._thread.join(10)


class KeptConnectionTest(unittest.TestCase):
    def test_a_kept_connection_closed_under_a_request_is_sent_anew(self) -> None:
        server = KeptConnection()
        self.addCleanup(server.close)
        with sluice.Client(server.url, timeout=5) as c:
            self.assertTrue(c.check(**NAMED).allowed)  # type: ignore[arg-type]
            self.assertTrue(c.check(**NAMED).allowed)  # type: ignore[arg-type]
        self.assertEqual((server.connections, server.requests), (2, 3))


class FailModeAgainstServerTest(unittest.TestCase):
    def test_errors_the_server_answers_raise_whatever_the_mode(self) -> None:
        server = Server("version: 1\npolicies:\n  chat: {algorithm: fixed_window, limit: 2, window: 60s, key: [user]}\nendpoints:\n  chat: [chat]\ntenants:\n  acme: {}\n")
        self.addCleanup(server.stop)
        with sluice.Client(server.url, ADMIN_KEY, fail_mode="open") as c:
            with self.assertRaises(sluice.BadRequest):
                c.check(endpoint="chat", tenant="acme")
            real = c.check(**NAMED)  # type: ignore[arg-type]
        self.assertTrue(real.allowed)
        self.assertFalse(real.failed_open)
        self.assertEqual(real.status, 200)


class ParseTest(unittest.TestCase):
    def test_ratelimit_headers(self) -> None:
        h = RateLimitHeaders.parse(
            {
                "ratelimit-policy": '"a\\"b";q=20;w=60, "jobs";q=1, tok;q=3',
                "ratelimit": '"a\\"b";r=15;t=45, "jobs";r=0;t=60',
                "x-ratelimit-limit": "20",
                "x-ratelimit-remaining": "x",
                "content-type": "application/json",
            }
        )
        self.assertEqual(
            [(i.name, i.quota, i.window, i.remaining, i.reset) for i in h.policies],
            [('a"b', 20, 60, 15, 45), ("jobs", 1, None, 0, 60), ("tok", 3, None, None, None)],
        )
        self.assertEqual((h.limit, h.remaining, h.reset, h.retry_after), (20, None, None, None))
        self.assertNotIn("content-type", h.raw)

    def test_go_times(self) -> None:
        t = parse_time("2026-11-23T07:00:00.123456789Z")
        assert t is not None
        self.assertEqual((t.microsecond, t.utcoffset()), (123456, __import__("datetime").timedelta(0)))
        self.assertIsNone(parse_time("yesterday"))


class PenaltyTest(unittest.TestCase):
    def test_required_fields_are_the_documents(self) -> None:
        """Penalty's fields without a default are those openapi.json's
        Penalty requires (after, base, max: none has a default), and each
        is sent."""
        import dataclasses
        import json
        import os

        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "..", "openapi", "openapi.json"), encoding="utf-8") as f:
            schema = json.load(f)["components"]["schemas"]["Penalty"]
        fields = dataclasses.fields(sluice.Penalty)
        self.assertEqual(sorted(f.name for f in fields), sorted(schema["properties"]))
        required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        self.assertEqual(sorted(required), sorted(schema["required"]))
        with self.assertRaises(TypeError):
            sluice.Penalty(after=3)  # type: ignore[call-arg]
        self.assertEqual(sluice.Penalty(after=3, base="1m", max=3600).to_wire(), {"after": 3, "base": "1m", "max": 3600})


if __name__ == "__main__":
    unittest.main()
