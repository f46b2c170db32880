// Starts a real `sluice serve` for the tests: on a free 127.0.0.1 port
// (--addr 127.0.0.1:0, the port read from its "sluice serving" log line),
// with its own data directory, an admin key and a configuration file, and
// kills it when the test ends.
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync } from "node:fs";

const here = dirname(fileURLToPath(import.meta.url));

/** The binary: $SLUICE_BINARY, else the repository's bin/sluice. */
export function binary() {
  const bin = process.env.SLUICE_BINARY || resolve(here, "../../../bin/sluice");
  if (!existsSync(bin)) {
    throw new Error(`no sluice binary at ${bin}: build it (go build -o bin/sluice ./cmd/sluice) or set SLUICE_BINARY`);
  }
  return bin;
}

export const ADMIN_KEY = "ts-client-admin-key-0123456789";

/**
 * serve(t, configYAML, extraArgs) starts a server and resolves with its
 * base URL; the test's `after` hook kills it and removes its directory.
 */
export async function serve(t, config, extraArgs = []) {
  const dir = await mkdtemp(join(tmpdir(), "sluice-ts-"));
  const cfg = join(dir, "sluice.yaml");
  await writeFile(cfg, config);
  const child = spawn(
    binary(),
    ["serve", "--addr", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--config", cfg, ...extraArgs],
    { env: { ...process.env, SLUICE_ADMIN_KEY: ADMIN_KEY }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  const exited = new Promise((res) => child.once("exit", res));
  t.after(async () => {
    child.kill("SIGKILL");
    await exited;
    await rm(dir, { recursive: true, force: true });
  });
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`sluice did not start within 30s:\n${log}`)), 30_000);
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => {
      if (log.length > 1 << 16) return; // drained, not kept, once started
      log += chunk;
      const m = /msg="sluice serving" addr=(\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        res(`http://${m[1]}`);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      rej(new Error(`sluice exited with ${code} before serving:\n${log}`));
    });
  });
  return url;
}
