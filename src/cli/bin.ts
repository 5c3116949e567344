#!/usr/bin/env node
/**
 * The `oats` entry point. It stays tiny so a cold `oats --version` costs
 * about as much as starting node: a lone `--version`/`-V` (with or without
 * `--json`) is answered from package.json without loading commander, zod or
 * the library. Everything else runs main.ts as bundled by `npm run build`
 * (scripts/bundle-cli.mjs: dist/cli/bundle/oats.cjs, run by load-bundle.ts
 * with the V8 code cache an earlier run wrote), or for `verify` and `digest`
 * the bundle of that command alone (oats-verify.cjs, oats-digest.cjs), so a
 * command opens a handful of files instead of a few hundred modules and
 * compiles little; run from source (tsx), it loads main.ts. A run that found
 * no code cache writes one once its command is done (saveCodeCache).
 *
 * In JSON mode stdout carries exactly one envelope line. `--json` is detected
 * here, before any module is loaded, and stdout is pointed at stderr for
 * everyone but the envelope writer, so nothing a module prints while loading
 * or running (a stray console.log, a warning) can corrupt it.
 */
import { packageVersion } from "./support/version.js";

const argv = process.argv.slice(2);
const terminator = argv.indexOf("--");
const optionArgs = terminator === -1 ? argv : argv.slice(0, terminator);
const json = optionArgs.includes("--json");
const rest = argv.filter((arg) => arg !== "--json");
const writeOut: (text: string) => void = process.stdout.write.bind(process.stdout);

function internalFailure(error: unknown): number {
  const message = error instanceof Error ? error.message : String(error);
  if (json) {
    writeOut(
      JSON.stringify({
        schemaVersion: 1,
        ok: false,
        command: null,
        error: { code: "internal-error", kind: "internal", message, details: {} },
      }) + "\n",
    );
  } else {
    process.stderr.write(
      `oats: internal-error: ${message}\nthis is a bug in oats or its ` +
        `installation; reinstall it, and report the message above if it persists.\n`,
    );
  }
  return 1;
}

/** The bundle beside the built bin.js (load-bundle.ts), and what to do once the command is done; main.ts itself when
 * run from source. */
async function loadMain(): Promise<{ main: typeof import("./main.js").main; done: () => void }> {
  if (import.meta.url.endsWith(".ts")) return { main: (await import("./main.js")).main, done: () => undefined };
  const { loadBundle, fastCommandOf, saveCodeCache } = await import("./load-bundle.js");
  const loaded = loadBundle({ command: fastCommandOf(argv) });
  return { main: loaded.main, done: () => saveCodeCache(loaded, argv) };
}

if (rest.length === 1 && (rest[0] === "--version" || rest[0] === "-V")) {
  try {
    const version = packageVersion();
    writeOut(
      json
        ? `${JSON.stringify({ schemaVersion: 1, ok: true, command: "version", result: { version } })}\n`
        : `${version}\n`,
    );
  } catch (error) {
    process.exitCode = internalFailure(error);
  }
} else {
  // Past a file size limit (RLIMIT_FSIZE) the kernel sends SIGXFSZ with the write that fails. Node ignores it, so
  // the write fails with EFBIG and oats refuses; signal-exit (loaded with proper-lockfile) would catch it and, with
  // no other listener, raise it again with its default action, killing oats between a failed write and its cleanup.
  // The library adds the same listener before its first lock loads proper-lockfile (retention/store/lockfile.ts);
  // this one is in place from the start.
  process.on("SIGXFSZ", () => undefined);
  if (json) process.stdout.write = process.stderr.write.bind(process.stderr) as typeof process.stdout.write;
  try {
    const { main, done } = await loadMain();
    process.exitCode = await main(argv, { json, writeOut });
    done();
  } catch (error) {
    process.exitCode = internalFailure(error);
  }
}
