import lockfile from "proper-lockfile";

/**
 * proper-lockfile, as every lock of the store takes it (publish-lock.ts,
 * lease.ts), with SIGXFSZ left as Node leaves it.
 *
 * proper-lockfile releases its locks on exit through signal-exit, which,
 * from the first lock on, listens to every signal and, when it is a
 * signal's only listener, raises that signal again with its default
 * action. Node ignores SIGXFSZ: past a file size limit (RLIMIT_FSIZE) the
 * write that crosses it fails with EFBIG, and oats refuses. With
 * signal-exit listening alone, the process was killed by the signal
 * instead, between the failed write and its cleanup: the CLI since its
 * bin.ts listener (the thirteenth session), and any program that imports the
 * library until now. One listener of our own, which does nothing, makes
 * signal-exit see another listener, so the signal is ignored as before.
 * Added when this module loads, before any lock is taken.
 */
function ignoreFileSizeSignal(): void {}

process.on("SIGXFSZ", ignoreFileSizeSignal);

export default lockfile;
