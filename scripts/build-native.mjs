/**
 * Compiles native/*.c into dist/native/oats.node: the small-file reads of a
 * digest pass, the read-ahead threads for a cold page cache and the ring
 * that copies a warm large file on a second core
 * (src/engine/native-reads.ts loads it; native/addon.c lists what
 * it holds).
 * `npm run build` runs it after tsc. It needs a C compiler ($CC, else cc)
 * and the Node-API headers of the node-api-headers package; nothing else
 * (no node-gyp, no download).
 *
 * Without a compiler the build goes on and says so: the library then reads
 * every file from JavaScript, the same way, only slower. CI has one
 * (.ci/run installs gcc where it is missing), and a test fails when the
 * addon is not there, so a broken compile cannot pass unnoticed.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const sources = readdirSync(join(root, "native"))
  .filter((name) => name.endsWith(".c"))
  .sort()
  .map((name) => join(root, "native", name));
const output = join(root, "dist", "native", "oats.node");
const headers = createRequire(import.meta.url)("node-api-headers").include_dir;
const compiler = process.env.CC || "cc";

mkdirSync(dirname(output), { recursive: true });
rmSync(output, { force: true });
if (process.platform !== "linux") {
  console.log(`build-native: ${process.platform} is not Linux; digests use the JavaScript reads`);
  process.exit(0);
}
// -z nodelete: the addon starts detached threads (read-ahead, the second reader of a run) that may outlive the
// call or the worker that made it by a moment; the code they run must never be unmapped under them.
const args = [
  "-O2",
  "-std=c11",
  "-Wall",
  "-Wextra",
  "-Werror",
  "-shared",
  "-fPIC",
  "-pthread",
  "-fvisibility=hidden",
  "-Wl,-z,nodelete",
  `-I${headers}`,
  ...sources,
  "-o",
  output,
];
const result = spawnSync(compiler, args, { stdio: ["ignore", "inherit", "inherit"] });
if (result.error || result.status !== 0) {
  const why = result.error ? result.error.message : `exit ${result.status}`;
  console.warn(
    `build-native: ${compiler} failed (${why}); dist/native/oats.node was ` +
      `not built and digests use the JavaScript reads`,
  );
  process.exit(0);
}
console.log(`build-native: ${output}`);
