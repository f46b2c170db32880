"""docs/python.md's example, run as the page writes it: seed 003's
check_rate_limit(user_id, endpoint) on the example configuration
(examples/sluice.yaml: chat, 20 a minute per user), with a tenant's API key."""

from __future__ import annotations

import os
import re
import unittest
from typing import Any, Callable, Dict
from unittest import mock

from _server import REPO, Server

import sluice


def doc_example() -> str:
    """The first python block after docs/python.md's seed 003 heading."""
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        page = f.read()
    m = re.search(r"## Seed 003's `check_rate_limit`.*?```python\n(.*?)```", page, re.S)
    if m is None:
        raise AssertionError("docs/python.md has no seed 003 example")
    return m.group(1)


class Seed003Test(unittest.TestCase):
    def test_check_rate_limit_as_the_docs_write_it(self) -> None:
        with open(os.path.join(REPO, "examples", "sluice.yaml")) as f:
            server = Server(f.read())
        self.addCleanup(server.stop)
        token = server.tenant_key("demo")

        scope: Dict[str, Any] = {}
        with mock.patch.dict(os.environ, {"SLUICE_URL": server.url, "SLUICE_KEY": token}):
            exec(compile(doc_example(), "docs/python.md", "exec"), scope)
        self.addCleanup(scope["client"].close)
        check_rate_limit: Callable[[str, str], sluice.CheckResult] = scope["check_rate_limit"]

        for i in range(20):
            r = check_rate_limit("auth0|123456", "chat")
            self.assertTrue(r.allowed, "request {}".format(i + 1))
            self.assertEqual(r.limit, 20)
            self.assertEqual(r.remaining, 19 - i)
        denied = check_rate_limit("auth0|123456", "chat")
        self.assertFalse(denied.allowed)
        self.assertGreater(denied.retry_after, 0)
        self.assertLessEqual(denied.retry_after, 60)
        self.assertTrue(check_rate_limit("auth0|other", "chat").allowed)
        self.assertEqual(check_rate_limit("auth0|123456", "models").remaining, 9)

        client: sluice.Client = scope["client"]
        # A tenant key reaches its own tenant only: 403, raised.
        with self.assertRaises(sluice.Forbidden):
            client.check(endpoint="chat", tenant="acme", key={"user": "u"})
        # An endpoint the configuration lacks is a mistake, raised, not failed open.
        with self.assertRaises(sluice.BadRequest):
            check_rate_limit("u", "no-such-endpoint")

        # Nothing answering: fails open, as seed 003 does.
        with mock.patch.dict(os.environ, {"SLUICE_URL": "http://127.0.0.1:1", "SLUICE_KEY": token}):
            down: Dict[str, Any] = {}
            exec(compile(doc_example(), "docs/python.md", "exec"), down)
        opened = down["check_rate_limit"]("u", "chat")
        self.assertTrue(opened.allowed)
        self.assertTrue(opened.failed_open)


if __name__ == "__main__":
    unittest.main()
