import {
  closeSync,
  constants,
  fsync,
  fstatSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  renameSync,
  rmdirSync,
  type Stats,
  statSync,
  unlinkSync,
} from "node:fs";
import { dirname } from "node:path";
import { promisify } from "node:util";
import { OatsError, errnoCode, bytesDigester } from "../core/index.js";
import { inDirectory, writeRestSync, assertContained, stagingName } from "../retention/index.js";
import { asEvidenceFile, digestFarSideFile, type EvidenceFile, type FarSideRun } from "./evidence-file.js";
import { runHex } from "./run-id.js";
import { openShareRun, readShareRun } from "./transport-dir-read.js";
import { DIRECTORY_FLAGS, RUNS_DIR, closeQuietly, openShareRoot, openShareRuns, shareError } from "./share-fs.js";
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

/**
 * Copy a file into the staging directory through a bounded buffer (O_EXCL|O_NOFOLLOW, fsync'd), hashing what is
 * written: bytes that are not the digest the file was handed over with (its source changed meanwhile) are refused
 * before anything is renamed into place.
 */
async function copyInto(at: string, file: EvidenceFile, to: string, runId: string, name: string): Promise<void> {
  const fd = openSync(at, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
  try {
    const digester = bytesDigester();
    let bytes = 0;
    await file.pieces((piece) => {
      digester.update(piece);
      bytes += piece.length;
      writeRestSync(fd, piece);
    });
    const digest = digester.digest();
    if (digest !== file.digest || bytes !== file.size)
      throw new OatsError("integrity-mismatch", `${name} of run ${runId} changed while it was copied to ${to}`, {
        to,
        runId,
        file: name,
        reason: "changed-while-sent",
        expected: file.digest,
        actual: digest,
      });
    // In the thread pool: flushing gigabytes does not hold the event loop.
    await promisify(fsync)(fd);
  } finally {
    closeSync(fd);
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

  const openShare = (): number => openShareRoot(share);
  const openRuns = (shareFd: number, create: boolean): number | null => openShareRuns(share, shareFd, create);

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

  const openBack = (runId: string): Promise<FarSideRun | null> => openShareRun(share, runId);
  const readBack = (runId: string): Promise<Map<string, Buffer> | null> => readShareRun(share, runId);

  /** Same bytes already there (by digest, streamed): idempotent. Else integrity-mismatch, nothing replaced. */
  const compareExisting = async (bundle: EvidenceBundle): Promise<void> => {
    const there = await openBack(bundle.runId);
    const differences: string[] = [];
    try {
      for (const [name, given] of bundle.files) {
        const file = asEvidenceFile(given);
        const held = there?.files.get(name);
        if (held === undefined) {
          differences.push(`${name}: missing`);
          continue;
        }
        const streamed = await digestFarSideFile(held, file.size);
        if (streamed.digest !== file.digest || streamed.bytes !== file.size)
          differences.push(`${name}: ${streamed.digest} is not ${file.digest}`);
      }
      for (const name of there?.files.keys() ?? [])
        if (!bundle.files.has(name as never)) differences.push(`${name}: unexpected`);
    } finally {
      await there?.close();
    }
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
      for (const [name, given] of bundle.files) {
        written.push(name);
        await copyInto(
          inDirectory(stagingFd, `${runsPath}/${staging}`, name),
          asEvidenceFile(given),
          to,
          bundle.runId,
          name,
        );
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

  return { describe: () => to, probe, put, readBack, openBack };
}
