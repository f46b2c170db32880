"""Starts a real ``sluice serve`` for the tests: on a free 127.0.0.1 port
(--addr 127.0.0.1:0, the port read from its "sluice serving" log line), with
its own data directory, an admin key and a configuration file; ``stop``
kills it and removes the directory. As clients/typescript/test/server.mjs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))  # the sluice package

ADMIN_KEY = "py-client-admin-key-0123456789"


def binary() -> str:
    """$SLUICE_BINARY, else the repository's bin/sluice."""
    path = os.environ.get("SLUICE_BINARY") or os.path.join(REPO, "bin", "sluice")
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            "no sluice binary at {}: build it (go build -o bin/sluice ./cmd/sluice) or set SLUICE_BINARY".format(path)
        )
    return path


class Server:
    """One ``sluice serve``; ``url`` is its base URL once started."""

    def __init__(self, config: str, extra_args: Optional[List[str]] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="sluice-py-")
        cfg = os.path.join(self.dir, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(config)
        env = dict(os.environ, SLUICE_ADMIN_KEY=ADMIN_KEY)
        self.proc = subprocess.Popen(
            [binary(), "serve", "--addr", "127.0.0.1:0", "--data-dir", os.path.join(self.dir, "data"), "--config", cfg]
            + list(extra_args or []),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.log = ""
        self._ready = threading.Event()
        self.url = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(30) or not self.url:
            self.stop()
            raise RuntimeError("sluice did not start within 30s:\n" + self.log)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in iter(self.proc.stderr.readline, b""):
            if self._ready.is_set():
                continue  # drained, not kept, once started
            self.log += line.decode("utf-8", "replace")
            m = re.search(r'msg="sluice serving" addr=(\S+)', self.log)
            if m:
                self.url = "http://" + m.group(1)
                self._ready.set()
        self._ready.set()  # exited

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def admin(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """An admin call, with urllib, outside the client under test."""
        req = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + ADMIN_KEY, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            out: Dict[str, Any] = json.loads(resp.read())
            return out

    def tenant_key(self, tenant: str) -> str:
        """Creates the tenant and an API key of it; the key's secret."""
        self.admin("POST", "/v1/tenants", {"id": tenant})
        token: str = self.admin("POST", "/v1/tenants/{}/keys".format(tenant), {"name": "py"})["token"]
        return token
