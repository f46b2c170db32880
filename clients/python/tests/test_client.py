"""The client against a real ``sluice serve`` (tests/_server.py)."""

from __future__ import annotations

import datetime
import gc
import threading
import time
import unittest

from _server import ADMIN_KEY, Server

import sluice
from sluice import InlineCheck, Policy

CONFIG = """
version: 1
policies:
  chat: {algorithm: fixed_window, limit: 2, window: 60s, key: [user]}
  per-minute: {algorithm: fixed_window, limit: 5, window: 60s, key: [user]}
  per-hour: {algorithm: fixed_window, limit: 1, window: 1h, key: [user]}
  reports-running: {algorithm: concurrency, limit: 2, leaseTTL: 60s}
  exports-running: {algorithm: concurrency, limit: 1, leaseTTL: 60s}
endpoints:
  chat: [chat]
tenants:
  acme: {}
upstreams:
  partner-api: {rate: 100, window: 1s, burst: 10}
  scarce: {rate: 1, window: 1h, burst: 1, maxWait: 2s}
"""


class ClientTest(unittest.TestCase):
    server: Server
    client: sluice.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server(CONFIG)
        cls.client = sluice.Client(cls.server.url, ADMIN_KEY)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        cls.server.stop()

    def test_endpoint_admits_to_its_limit_then_denies_with_retry_after(self) -> None:
        for remaining in (1, 0):
            r = self.client.check(endpoint="chat", tenant="acme", key={"user": "u-1"})
            self.assertTrue(r.allowed)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.policy, "chat")
            self.assertEqual(r.limit, 2)
            self.assertEqual(r.remaining, remaining)
            self.assertEqual(r.retry_after, 0)
            self.assertEqual(r.headers.limit, 2)
            self.assertEqual(r.headers.remaining, remaining)
            self.assertIsNone(r.headers.retry_after)
            item = r.headers.policy("chat")
            self.assertIsNotNone(item)
            assert item is not None
            self.assertEqual((item.quota, item.window, item.remaining), (2, 60, remaining))

        denied = self.client.check("chat", tenant="acme", key={"user": "u-1"})
        self.assertFalse(denied.allowed)
        self.assertEqual(denied.status, 429)
        self.assertEqual(denied.remaining, 0)
        self.assertIsInstance(denied.retry_after, float)
        self.assertGreater(denied.retry_after, 0)
        self.assertLessEqual(denied.retry_after, 60)
        self.assertAlmostEqual(denied.retry_after, denied.retry_after_ms / 1000)
        self.assertGreaterEqual(denied.reset_at, int(time.time()))
        self.assertEqual(denied.violated_policies, ("chat",))
        self.assertEqual([d.allowed for d in denied.decisions], [False])
        self.assertIn("Too many requests", denied.message or "")
        # The headers: Retry-After whole seconds, never before retry_after.
        self.assertIsNotNone(denied.headers.retry_after)
        assert denied.headers.retry_after is not None
        self.assertGreaterEqual(denied.headers.retry_after, denied.retry_after)
        self.assertEqual(denied.headers.reset, denied.reset_at)
        self.assertIn("ratelimit", denied.headers.raw)

        # Another user has a counter of its own.
        other = self.client.check(policies=["chat"], tenant="acme", key={"user": "u-2"})
        self.assertTrue(other.allowed)
        self.assertEqual(other.remaining, 1)

    def test_several_policies_all_or_nothing(self) -> None:
        req = dict(policies=["per-minute", "per-hour"], tenant="acme", key={"user": "u-all"})
        first = self.client.check(**req)  # type: ignore[arg-type]
        self.assertTrue(first.allowed)
        self.assertEqual([(d.policy, d.allowed, d.remaining) for d in first.decisions], [("per-minute", True, 4), ("per-hour", True, 0)])
        self.assertEqual([i.name for i in first.headers.policies], ["per-minute", "per-hour"])
        self.assertEqual(first.headers.policy("per-hour").window, 3600)  # type: ignore[union-attr]

        second = self.client.check(**req)  # type: ignore[arg-type]
        self.assertFalse(second.allowed)
        self.assertEqual(second.policy, "per-hour")
        self.assertEqual(second.violated_policies, ("per-hour",))
        self.assertGreater(second.retry_after, 60)
        # Denied, so the minute's policy consumed nothing.
        self.assertEqual([(d.policy, d.allowed, d.remaining) for d in second.decisions], [("per-minute", True, 4), ("per-hour", False, 0)])

        # hits=0 reads without consuming.
        peek = self.client.check(policies=["per-minute"], tenant="acme", key={"user": "u-all"}, hits=0)
        self.assertEqual(peek.remaining, 4)

    def test_inline_policies(self) -> None:
        checks = [
            InlineCheck(Policy("py-per-minute", "sliding_window", 100, window=datetime.timedelta(minutes=1)), key="tenant"),
            InlineCheck(Policy("py-per-hour", "token_bucket", 1, window="1h", penalty=sluice.Penalty(after=3, base="1m", max=datetime.timedelta(hours=1))), key="user-42"),
        ]
        first = self.client.check(checks=checks, tenant="acme", hits=1)
        self.assertTrue(first.allowed)
        self.assertEqual([(d.policy, d.allowed, d.remaining) for d in first.decisions], [("py-per-minute", True, 99), ("py-per-hour", True, 0)])
        second = self.client.check(checks=checks, tenant="acme")
        self.assertFalse(second.allowed)
        self.assertEqual(second.policy, "py-per-hour")
        self.assertEqual(second.violated_policies, ("py-per-hour",))
        self.assertGreaterEqual(second.retry_after, 1)
        self.assertEqual(second.decisions[0].remaining, 99)

        # A mapping is sent as it is, in the wire's names.
        raw = self.client.check(
            checks=[{"key": "k", "policy": {"name": "py-raw", "algorithm": "fixed_window", "limit": 3, "window": 60, "failMode": "closed"}}],
            tenant="acme",
        )
        self.assertEqual((raw.policy, raw.limit, raw.remaining), ("py-raw", 3, 2))

    def test_bad_input_raises_naming_the_field(self) -> None:
        with self.assertRaises(sluice.BadRequest) as cm:
            self.client.check(endpoint="chat", tenant="acme")
        err = cm.exception
        self.assertIsInstance(err, sluice.SluiceError)
        self.assertEqual(err.status, 400)
        self.assertEqual(err.code, "invalid_request")
        self.assertEqual(err.field, "key.user")
        self.assertIn("key.user", err.message)
        self.assertEqual(err.body.get("field"), "key.user")

        with self.assertRaises(sluice.BadRequest) as cm:
            self.client.check(checks=[InlineCheck(Policy("bad", "fixed_window", 0, window="1s"), key="k")], tenant="acme")
        self.assertEqual(cm.exception.field, "checks[0].policy.limit")

        with self.assertRaises(sluice.BadRequest) as cm:
            self.client.check(endpoint="no-such-endpoint", tenant="acme", key={"user": "u"})
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.field, "endpoint")

        # Misuse is caught before any request.
        with self.assertRaises(TypeError):
            self.client.check(tenant="acme")
        with self.assertRaises(TypeError):
            self.client.check(endpoint="chat", policies=["chat"], tenant="acme")

    def test_wrong_api_key_is_unauthorized(self) -> None:
        with sluice.Client(self.server.url, "sk_acme.nope.nope") as wrong:
            with self.assertRaises(sluice.Unauthorized) as cm:
                wrong.check(endpoint="chat", tenant="acme", key={"user": "u-1"})
        self.assertEqual(cm.exception.status, 401)
        self.assertEqual(cm.exception.code, "unauthorized")
        self.assertIsNone(cm.exception.field)

    def test_another_tenants_key_is_forbidden(self) -> None:
        token = self.server.tenant_key("globex")
        with sluice.Client(self.server.url, token) as globex:
            # Its own tenant, named or not.
            self.assertTrue(globex.check(checks=[InlineCheck(Policy("py-own", "fixed_window", 5, window=60))]).allowed)
            with self.assertRaises(sluice.Forbidden) as cm:
                globex.check(endpoint="chat", tenant="acme", key={"user": "u-1"})
            self.assertEqual(cm.exception.status, 403)
            self.assertEqual(cm.exception.code, "forbidden")
            with self.assertRaises(sluice.Forbidden):
                globex.acquire_lease("reports-running", tenant="acme")

    def test_leases_to_the_limit_release_renew(self) -> None:
        req = dict(tenant="acme")
        a = self.client.acquire_lease("reports-running", units=1, **req)
        b = self.client.acquire_lease("reports-running", **req)
        self.assertTrue(a.allowed and b.allowed)
        assert a.lease is not None and a.token is not None and b.token is not None
        self.assertGreater(a.lease.expires_at_ms, time.time() * 1000)
        self.assertGreater(a.lease.expires_at, datetime.datetime.now(datetime.timezone.utc))
        self.assertNotEqual(a.token, b.token)

        full = self.client.acquire_lease("reports-running", **req)
        self.assertFalse(full.allowed)
        self.assertEqual(full.status, 429)
        self.assertIsNone(full.lease)
        self.assertIsNone(full.token)
        self.assertGreater(full.retry_after, 0)

        renewed = self.client.renew_lease(a.token, "reports-running", **req)
        self.assertTrue(renewed.allowed)
        assert renewed.lease is not None
        self.assertGreaterEqual(renewed.lease.expires_at_ms, a.lease.expires_at_ms)

        released = self.client.release_lease(a.token, "reports-running", **req)
        self.assertEqual(released.remaining, 1)
        with self.assertRaises(sluice.NotFound) as cm:
            self.client.release_lease(a.token, "reports-running", **req)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(sluice.NotFound):
            self.client.renew_lease(a.token, "reports-running", **req)

        again = self.client.acquire_lease("reports-running", **req)
        self.assertTrue(again.allowed)
        for held in (again, b):
            assert held.token is not None
            self.client.release_lease(held.token, "reports-running", **req)

    def test_lease_context_manager(self) -> None:
        with self.client.lease("exports-running", tenant="acme") as lease:
            self.assertIsNotNone(lease.token)
            # Held: the one unit is taken, and a second `with` is refused.
            with self.assertRaises(sluice.LeaseRefused) as cm:
                with self.client.lease("exports-running", tenant="acme"):
                    self.fail("entered a lease whose units are all held")
            self.assertEqual(cm.exception.status, 429)
            self.assertFalse(cm.exception.result.allowed)
            self.assertIsNotNone(cm.exception.retry_after)
            renewed = lease.renew()
            self.assertTrue(renewed is not None and renewed.allowed)
        # Released on leaving.
        self.assertEqual(self.client.check(policies=["exports-running"], tenant="acme", hits=0).remaining, 1)

        # Released when the body raises, and the body's exception is raised.
        with self.assertRaises(KeyError):
            with self.client.lease("exports-running", tenant="acme"):
                self.assertFalse(self.client.acquire_lease("exports-running", tenant="acme").allowed)
                raise KeyError("boom")
        again = self.client.acquire_lease("exports-running", tenant="acme")
        self.assertTrue(again.allowed)
        assert again.token is not None
        self.client.release_lease(again.token, "exports-running", tenant="acme")

        # A lease released in the body is not released twice.
        with self.client.lease("exports-running", tenant="acme") as lease:
            self.assertIsNotNone(lease.release())
            self.assertIsNone(lease.release())

    def test_inline_concurrency_lease_with_key_value(self) -> None:
        policy = Policy("py-jobs", "concurrency", 2, lease_ttl="30s")
        a = self.client.acquire_lease(policy, tenant="acme", key_value="u-9", units=2)
        self.assertTrue(a.allowed)
        self.assertFalse(self.client.acquire_lease(policy, tenant="acme", key_value="u-9").allowed)
        # Another key value is another counter.
        self.assertTrue(self.client.acquire_lease(policy, tenant="acme", key_value="u-10").allowed)
        assert a.token is not None
        self.client.release_lease(a.token, policy, tenant="acme", key_value="u-9")
        with self.client.lease(policy, tenant="acme", key_value="u-9", units=2) as held:
            self.assertIsNotNone(held.token)
        with self.assertRaises(TypeError):
            self.client.acquire_lease(policy, tenant="acme", key={"user": "u"})

    def test_upstream_acquire(self) -> None:
        ok = self.client.acquire("partner-api", tenant="acme", key="u-1", cost=1, max_wait=0.5)
        self.assertTrue(ok.granted)
        self.assertGreaterEqual(ok.waited_ms, 0)
        self.assertLessEqual(ok.waited_ms, 500)
        self.assertIsNotNone(ok.granted_at)
        assert ok.granted_at is not None
        self.assertEqual(ok.granted_at.tzinfo, datetime.timezone.utc)
        self.assertLess(abs((ok.granted_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()), 300)

        # One unit an hour: the first takes it, the next cannot be had within 10ms.
        self.assertTrue(self.client.acquire("scarce", tenant="acme", key="u-1").granted)
        refused = self.client.acquire("scarce", tenant="acme", key="u-1", max_wait=datetime.timedelta(milliseconds=10))
        self.assertFalse(refused.granted)
        self.assertEqual(refused.reason, "shortage")
        self.assertEqual(refused.upstream, "scarce")
        self.assertGreater(refused.retry_after_ms, 10)
        self.assertGreater(refused.retry_after, 0.01)
        self.assertIsNone(refused.granted_at)

        with self.assertRaises(sluice.NotFound) as cm:
            self.client.acquire("no-such-upstream", tenant="acme", key="u-1")
        self.assertEqual(cm.exception.code, "not_found")
        with self.assertRaises(sluice.BadRequest) as bad:
            self.client.acquire("partner-api", tenant="acme", key="")
        self.assertEqual(bad.exception.field, "key")

    def test_connection_is_reused(self) -> None:
        with sluice.Client(self.server.url, ADMIN_KEY) as c:
            c.check(checks=[InlineCheck(Policy("py-reuse", "fixed_window", 100, window=60))], tenant="acme")
            conn = c._local.conn[1]
            sock = conn.sock
            self.assertIsNotNone(sock)
            c.check(checks=[InlineCheck(Policy("py-reuse", "fixed_window", 100, window=60))], tenant="acme")
            self.assertIs(c._local.conn[1].sock, sock)

            # Another thread has its own, gone with the thread.
            seen = []
            t = threading.Thread(target=lambda: seen.append(c.check(checks=[InlineCheck(Policy("py-reuse", "fixed_window", 100, window=60))], tenant="acme")))
            t.start()
            t.join(60)
            self.assertEqual(len(seen), 1)
            del t
            gc.collect()
            self.assertEqual(len(c._conns), 1)


if __name__ == "__main__":
    unittest.main()
