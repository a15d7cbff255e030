// A real `ttw server` for the tests: the workspace's binary (or TTW_BIN),
// started on a configuration file with the environment it names.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));

/** The `ttw` binary the tests run. */
export function ttwBinary() {
  if (process.env.TTW_BIN) return process.env.TTW_BIN;
  const target = process.env.CARGO_TARGET_DIR ?? join(here, "..", "..", "..", "target");
  const path = join(target, "debug", "ttw");
  if (!existsSync(path)) throw new Error(`no ttw binary at ${path}: run \`cargo build -p ttw\` or set TTW_BIN`);
  return path;
}

/** Starts `ttw server --config config` with `env` added (and no
 * DATABASE_URL): the child process, its `url` set once it listens. */
export async function startServer(config, env) {
  const all = { ...process.env, ...env };
  delete all.DATABASE_URL;
  const server = spawn(ttwBinary(), ["server", "--config", config], { env: all, stdio: ["ignore", "pipe", "ignore"] });
  const lines = createInterface({ input: server.stdout });
  const first = await new Promise((resolve) => lines.once("line", resolve));
  const prefix = "ttw server: listening on ";
  assert.ok(first.startsWith(prefix), `unexpected first line: ${first}`);
  server.url = first.slice(prefix.length).replace(/\/+$/, "");
  lines.on("line", () => {});
  return server;
}
