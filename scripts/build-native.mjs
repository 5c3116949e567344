/**
 * Compiles native/*.c into dist/native/oats.node: the small-file reads of a
 * digest pass, the read-ahead threads for a cold page cache and the ring
 * that copies a warm large file on a second core
 * (src/engine/native-reads.ts loads it; native/addon.c lists what
 * it holds).
 *
 * It runs on the machine that will use the addon, never elsewhere: the
 * addon is machine code for one platform and architecture, so the package
 * ships its sources (native/, with the Node-API headers in native/include/)
 * and this script, not the compiled file.
 *
 * - `npm run build` runs it after tsc (a checkout, and `npm pack`'s prepare;
 *   the pack leaves the file out).
 * - The package's `install` script runs it with `--install`, in the installed
 *   package. In a checkout (src/ is there) it does nothing: `npm ci` runs
 *   prepare next, which builds everything.
 *
 * It needs a C compiler ($CC, else cc) and nothing else: no node-gyp, no
 * download, no headers from the Node installation. It never fails: without a
 * compiler, off Linux, or when the compile fails, it says so in one line and
 * exits 0, and the library reads every file from JavaScript, the same way,
 * only slower (`oats doctor` says which reads a run uses, and why). The file
 * appears by a rename, whole or not at all, so a half-written addon is never
 * loaded. CI has a compiler (.ci/run installs gcc where it is missing), and a
 * test fails when a compiler is there and the addon is not, so a broken
 * compile cannot pass unnoticed.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const install = process.argv.includes("--install");
const output = join(root, "dist", "native", "oats.node");
const say = (line) => console.log(`${install ? "oats-retention" : "build-native"}: ${line}`);

function build() {
  if (install && existsSync(join(root, "src", "cli", "bin.ts"))) return; // a checkout: prepare builds it
  if (process.platform !== "linux") {
    say(`${process.platform} is not Linux; digests use the JavaScript reads`);
    return;
  }
  const sources = readdirSync(join(root, "native"))
    .filter((name) => name.endsWith(".c"))
    .sort()
    .map((name) => join(root, "native", name));
  const compiler = process.env.CC || "cc";
  const partial = `${output}.${process.pid}.tmp`;
  mkdirSync(dirname(output), { recursive: true });
  rmSync(output, { force: true });
  // -z nodelete: the addon starts detached threads (read-ahead, the second reader of a run) that may outlive the
  // call or the worker that made it by a moment; the code they run must never be unmapped under them.
  const args = [
    "-O2",
    "-std=c11",
    "-Wall",
    "-Wextra",
    // Warnings fail the build here, where they are fixed; at install a newer compiler's new warning must not cost a
    // user the addon.
    ...(install ? [] : ["-Werror"]),
    "-shared",
    "-fPIC",
    "-pthread",
    "-fvisibility=hidden",
    "-Wl,-z,nodelete",
    `-I${join(root, "native", "include")}`,
    ...sources,
    "-o",
    partial,
  ];
  const result = spawnSync(compiler, args, { stdio: ["ignore", "inherit", "inherit"], timeout: 300_000 });
  if (result.error || result.status !== 0) {
    rmSync(partial, { force: true });
    const why = result.error ? result.error.message : `exit ${result.status ?? result.signal}`;
    say(`${compiler} failed (${why}); the native reads were not built and digests use the JavaScript reads`);
    return;
  }
  renameSync(partial, output);
  say(`built ${output}`);
}

try {
  build();
} catch (error) {
  const why = error instanceof Error ? error.message : String(error);
  say(`the native reads were not built (${why}); digests use the JavaScript reads`);
}
