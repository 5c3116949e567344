import { createRequire } from "node:module";

type ProperLockfile = typeof import("proper-lockfile");

/**
 * proper-lockfile, as every lock of the store takes it (publish-lock.ts,
 * lease.ts), loaded with the first lock and with SIGXFSZ left as Node
 * leaves it.
 *
 * Loaded on first use, not with this module: it brings graceful-fs,
 * signal-exit and node's assert, a few milliseconds of every start, and a
 * verify or a digest takes no lock. The CLI's bundle keeps it bundled
 * (scripts/bundle-cli.mjs turns the createRequire call into the bundle's
 * own require, still evaluated only here).
 *
 * proper-lockfile releases its locks on exit through signal-exit, which,
 * from the first lock on, listens to every signal and, when it is a
 * signal's only listener, raises that signal again with its default
 * action. Node ignores SIGXFSZ: past a file size limit (RLIMIT_FSIZE) the
 * write that crosses it fails with EFBIG, and oats refuses. With
 * signal-exit listening alone, the process was killed by the signal
 * instead, between the failed write and its cleanup: the CLI before its
 * bin.ts listener, and any program that imports the library without this
 * one. One listener of our own, which does nothing, makes signal-exit see
 * another listener, so the signal is ignored as before.
 * Added before proper-lockfile loads, so before any lock is taken.
 */
function ignoreFileSizeSignal(): void {}

let loaded: ProperLockfile | null = null;

export function properLockfile(): ProperLockfile {
  if (loaded === null) {
    process.on("SIGXFSZ", ignoreFileSizeSignal);
    loaded = createRequire(import.meta.url)("proper-lockfile") as ProperLockfile;
  }
  return loaded;
}
