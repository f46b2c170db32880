// Runs node with the given arguments, adding --experimental-websocket on a
// Node without a global WebSocket (Node 20 and 21), for the gateway's tests.
import { spawnSync } from "node:child_process";

const flags = typeof globalThis.WebSocket === "function" ? [] : ["--experimental-websocket", "--no-warnings=ExperimentalWarning"];
const r = spawnSync(process.execPath, [...flags, ...process.argv.slice(2)], { stdio: "inherit" });
process.exit(r.status ?? 1);
