import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmdirSync,
  type Stats,
  statSync,
  unlinkSync,
} from "node:fs";
import { dirname } from "node:path";
import { OatsError, errnoCode, bytesDigest } from "../core/index.js";
import { inDirectory, readRegularFile, writeNewFileDurably, assertContained, stagingName } from "../retention/index.js";
import { runHex } from "./run-id.js";
import type { EvidenceBundle, EvidenceTransport, ProbeResult } from "./transport.js";

/**
 * The `dir:` transport: a share, i.e. a directory on another filesystem or
 * mount (`dir:/mnt/evidence`). Layout on the share:
 *
 *   <share>/runs/<hex>/record.json   the sealed record's exact bytes
 *   <share>/runs/<hex>/log           the log's exact bytes
 *   <share>/runs/<hex>/audit.jsonl   the audit lines that name the run
 *
 * where `<hex>` is the run id without its `oats.json.v1:` prefix. A run
 * directory appears whole or not at all: it is built as a dot-named staging
 * directory beside it, every file written with O_EXCL|O_NOFOLLOW and
 * fsync'd, the staging directory fsync'd, renamed into place (a rename onto
 * an existing run directory fails, never replaces) and `runs/` fsync'd.
 *
 * Other users may be able to write the share (a shared mount). Nothing they
 * plant redirects a write or a read: `runs/`, the staging directory and a
 * run directory are opened with O_DIRECTORY|O_NOFOLLOW and everything below
 * them is reached through the open descriptor (/proc/<pid>/fd/<fd>/<name>,
 * openat semantics), so a symlink swapped in for any of them is refused, not
 * followed. What another user can still do is replace our staging directory
 * between its writes and the rename; that is why delivery is only believed
 * after readBack reads the run directory back and every digest matches.
 *
 * The share path itself is the operator's (it may be reached through a
 * symlink, as mount points often are). By default a share on the same
 * filesystem as the scope's outbox is unreachable: an unmounted mount point
 * would otherwise receive the evidence onto the local disk and delivery
 * would claim success while nothing left the machine.
 */

export interface DirTransportOptions {
  /** The local path whose filesystem the share must differ from. */
  readonly localPath?: string;
  readonly allowSameFilesystem?: boolean;
}

const RUNS_DIR = "runs";

/**
 * The stat of `path`, or of its nearest existing ancestor: the filesystem it is, or will be, on. A scope's first
 * dispatch probes the far side before its outbox exists; its filesystem is then the scope's.
 */
function nearestExisting(path: string): Stats | null {
  for (let current = path; ; current = dirname(current)) {
    try {
      return statSync(current);
    } catch {
      if (dirname(current) === current) return null;
    }
  }
}
const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
/** A read-back file larger than this is refused rather than buffered. */
const READ_LIMIT = 2 * 1024 * 1024 * 1024 - 1;

/**
 * O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR on Linux (ELOOP
 * elsewhere): look at the name itself to say which it was.
 */
function isSymlinkAt(at: string): boolean {
  try {
    return lstatSync(at).isSymbolicLink();
  } catch {
    return false;
  }
}

function directoryErrno(error: unknown, at: string): string | undefined {
  const errno = errnoCode(error);
  return errno === "ENOTDIR" && isSymlinkAt(at) ? "ELOOP" : errno;
}

function shareError(
  share: string,
  what: string,
  error: unknown,
  details: Record<string, unknown> = {},
  at?: string,
): OatsError {
  const errno = at === undefined ? errnoCode(error) : directoryErrno(error, at);
  if (errno === "ELOOP") {
    return new OatsError(
      "invalid-artifact-store",
      `the share's ${what} is a symlink, refusing to follow it: ${share}`,
      { to: `dir:${share}`, component: what, reason: "symlink", ...details },
    );
  }
  if (errno === "ENOTDIR") {
    return new OatsError("invalid-artifact-store", `the share's ${what} is not a directory: ${share}`, {
      to: `dir:${share}`,
      component: what,
      reason: "not-a-directory",
      ...details,
    });
  }
  if (error instanceof OatsError) return error;
  return new OatsError(
    "internal-error",
    `writing to the share ${share} failed at ${what}: ${error instanceof Error ? error.message : String(error)}`,
    { to: `dir:${share}`, component: what, ...(errno ? { errno } : {}), ...details },
    { cause: error },
  );
}

function closeQuietly(fd: number | null): void {
  if (fd !== null) {
    try {
      closeSync(fd);
    } catch {
      // Already closed or never opened: nothing to release.
    }
  }
}

/** Refuse (staging-replaced) when the run directory at `at` is not the staging directory this push wrote. */
function assertRenamedOurs(ours: Stats, at: string, to: string, runId: string): void {
  const landed = lstatSync(at);
  if (landed.dev === ours.dev && landed.ino === ours.ino) return;
  throw new OatsError(
    "invalid-artifact-store",
    `the staging directory on ${to} was replaced by another user before it was renamed into place: ` +
      `run ${runId} there is not what this push wrote, and is not delivered`,
    { to, runId, reason: "staging-replaced" },
  );
}

/**
 * The `dir:` transport to a share, with the layout and guarantees of src/evidence/transport-dir.ts. Nothing is touched
 * until it is used; a share on the filesystem of `options.localPath` probes as unreachable (`same-filesystem`) unless
 * `options.allowSameFilesystem`.
 * @param share the share's absolute path
 */
export function dirTransport(share: string, options: DirTransportOptions = {}): EvidenceTransport {
  const to = `dir:${share}`;

  /** The share root: the operator's path, followed like any path the operator names. */
  const openShare = (): number => openSync(share, constants.O_RDONLY | constants.O_DIRECTORY);

  /** `runs/` inside the open share, created when `create`; null when absent and not created. */
  const openRuns = (shareFd: number, create: boolean): number | null => {
    const at = inDirectory(shareFd, share, RUNS_DIR);
    if (create) {
      try {
        mkdirSync(at, { mode: 0o755 });
      } catch (error) {
        if (errnoCode(error) !== "EEXIST") throw shareError(share, RUNS_DIR, error);
      }
    }
    try {
      return openSync(at, DIRECTORY_FLAGS);
    } catch (error) {
      if (errnoCode(error) === "ENOENT" && !create) return null;
      throw shareError(share, RUNS_DIR, error, {}, at);
    }
  };

  const probe = async (): Promise<ProbeResult> => {
    let stats;
    try {
      stats = statSync(share);
    } catch (error) {
      return {
        state: "unreachable",
        reason: errnoCode(error) === "ENOENT" ? "missing" : `unreadable (${errnoCode(error) ?? String(error)})`,
      };
    }
    if (!stats.isDirectory()) return { state: "unreachable", reason: "not-a-directory" };
    if (options.localPath !== undefined && options.allowSameFilesystem !== true) {
      const local = nearestExisting(options.localPath);
      if (local !== null && local.dev === stats.dev) return { state: "unreachable", reason: "same-filesystem" };
    }
    try {
      closeSync(openShare());
    } catch (error) {
      return { state: "unreachable", reason: `unreadable (${errnoCode(error) ?? String(error)})` };
    }
    return { state: "reachable", reason: null };
  };

  /** Read the run directory through descriptors only; null when the share holds nothing for the id. */
  const readBack = async (runId: string): Promise<Map<string, Buffer> | null> => {
    const hex = runHex(runId);
    let shareFd: number | null = null;
    let runsFd: number | null = null;
    let runFd: number | null = null;
    try {
      shareFd = openShare();
      runsFd = openRuns(shareFd, false);
      if (runsFd === null) return null;
      assertContained(`${share}/${RUNS_DIR}`, `${share}/${RUNS_DIR}/${hex}`, `run ${runId}`);
      try {
        runFd = openSync(inDirectory(runsFd, `${share}/${RUNS_DIR}`, hex), DIRECTORY_FLAGS);
      } catch (error) {
        const errno = directoryErrno(error, inDirectory(runsFd, `${share}/${RUNS_DIR}`, hex));
        if (errno === "ENOENT") return null;
        if (errno === "ELOOP" || errno === "ENOTDIR") {
          throw new OatsError(
            "integrity-mismatch",
            `the share holds something other than a run directory for ${runId}: ` +
              `${errno === "ELOOP" ? "a symlink" : "not a directory"}`,
            {
              to,
              runId,
              reason: errno === "ELOOP" ? "symlink" : "not-a-directory",
            },
          );
        }
        throw error;
      }
      const dirPath = inDirectory(runsFd, `${share}/${RUNS_DIR}`, hex);
      const files = new Map<string, Buffer>();
      for (const name of readdirSync(inDirectory(runFd, dirPath, "")).sort()) {
        files.set(
          name,
          readRegularFile(inDirectory(runFd, dirPath, name), {
            limit: READ_LIMIT,
            refuse: (failure, details) =>
              new OatsError("integrity-mismatch", `cannot read ${name} of run ${runId} back from ${to}: ${failure}`, {
                to,
                runId,
                file: name,
                reason: failure,
                ...details,
              }),
          }),
        );
      }
      return files;
    } catch (error) {
      if (error instanceof OatsError) throw error;
      throw shareError(share, "run directory", error, { runId });
    } finally {
      closeQuietly(runFd);
      closeQuietly(runsFd);
      closeQuietly(shareFd);
    }
  };

  /** Same bytes already there: idempotent. Anything else: integrity-mismatch, nothing replaced. */
  const compareExisting = async (bundle: EvidenceBundle): Promise<void> => {
    const there = await readBack(bundle.runId);
    const differences: string[] = [];
    for (const [name, bytes] of bundle.files) {
      const held = there?.get(name);
      if (held === undefined) differences.push(`${name}: missing`);
      else if (!held.equals(bytes)) differences.push(`${name}: ${bytesDigest(held)} is not ${bytesDigest(bytes)}`);
    }
    for (const name of there?.keys() ?? [])
      if (!bundle.files.has(name as never)) differences.push(`${name}: unexpected`);
    if (differences.length > 0) {
      throw new OatsError(
        "integrity-mismatch",
        `${to} already holds run ${bundle.runId} with other content (${differences.join("; ")}); nothing was replaced`,
        {
          to,
          runId: bundle.runId,
          differences,
          reason: "existing-content-differs",
        },
      );
    }
  };

  const put = async (bundle: EvidenceBundle): Promise<void> => {
    const hex = runHex(bundle.runId);
    let shareFd: number | null = null;
    let runsFd: number | null = null;
    let stagingFd: number | null = null;
    const runsPath = `${share}/${RUNS_DIR}`;
    const staging = stagingName();
    const written: string[] = [];
    let renamed = false;
    try {
      try {
        shareFd = openShare();
      } catch (error) {
        throw new OatsError(
          "artifact-not-found",
          `the share ${share} cannot be opened: ${errnoCode(error) ?? String(error)}`,
          { to, reason: "far-side-unreachable", errno: errnoCode(error) },
        );
      }
      runsFd = openRuns(shareFd, true)!;
      assertContained(runsPath, `${runsPath}/${hex}`, `run ${bundle.runId}`);
      let existing = true;
      try {
        lstatSync(inDirectory(runsFd, runsPath, hex));
      } catch (error) {
        if (errnoCode(error) !== "ENOENT") throw error;
        existing = false;
      }
      if (existing) return await compareExisting(bundle);

      const stagingAt = inDirectory(runsFd, runsPath, staging);
      mkdirSync(stagingAt, { mode: 0o755 });
      const replaced = () =>
        new OatsError("invalid-artifact-store", `the staging directory on ${to} was replaced by another user`, {
          to,
          runId: bundle.runId,
          reason: "staging-replaced",
        });
      try {
        stagingFd = openSync(stagingAt, DIRECTORY_FLAGS);
      } catch (error) {
        // Made a moment ago and gone, or a link now: someone else moved it.
        if (["ENOENT", "ELOOP", "ENOTDIR"].includes(errnoCode(error) ?? "")) throw replaced();
        throw error;
      }
      if (fstatSync(stagingFd).uid !== process.getuid?.()) throw replaced();
      for (const [name, bytes] of bundle.files) {
        written.push(name);
        writeNewFileDurably(inDirectory(stagingFd, `${runsPath}/${staging}`, name), bytes, 0o644);
      }
      fsyncSync(stagingFd);
      try {
        renameSync(stagingAt, inDirectory(runsFd, runsPath, hex));
        renamed = true;
        // The rename names the staging by its path: in a runs/ others can write, another user may have moved ours
        // away and put a directory of theirs at that name. What landed must be the directory written through stagingFd.
        assertRenamedOurs(fstatSync(stagingFd), inDirectory(runsFd, runsPath, hex), to, bundle.runId);
      } catch (error) {
        if (error instanceof OatsError) throw error;
        if (errnoCode(error) === "ENOENT") throw replaced();
        // Another pusher (or a push that crashed after its rename) got there first.
        if (!["EEXIST", "ENOTEMPTY", "ENOTDIR", "EISDIR"].includes(errnoCode(error) ?? "")) throw error;
      }
      fsyncSync(runsFd);
      if (!renamed) await compareExisting(bundle);
    } catch (error) {
      if (error instanceof OatsError) throw error;
      throw shareError(share, "run directory", error, { runId: bundle.runId });
    } finally {
      if (!renamed && stagingFd !== null) {
        for (const name of written) {
          try {
            unlinkSync(inDirectory(stagingFd, `${runsPath}/${staging}`, name));
          } catch {
            // Best effort: a leftover staging directory is dot-named and never read as a run.
          }
        }
        try {
          rmdirSync(inDirectory(runsFd!, runsPath, staging));
        } catch {
          // As above.
        }
      }
      closeQuietly(stagingFd);
      closeQuietly(runsFd);
      closeQuietly(shareFd);
    }
  };

  return { describe: () => to, probe, put, readBack };
}
