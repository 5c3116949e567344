import { closeSync, openSync, readdirSync } from "node:fs";
import { OatsError, errnoCode } from "../core/index.js";
import { HeldFile, inDirectory, openNamedPath, assertContained, type ReadFailure } from "../retention/index.js";
import { readFarSideRun, readPieces, type FarSideFile, type FarSideRun } from "./evidence-file.js";
import { runHex } from "./run-id.js";
import {
  DIRECTORY_FLAGS,
  RUNS_DIR,
  closeQuietly,
  directoryErrno,
  openShareRoot,
  openShareRuns,
  shareError,
} from "./share-fs.js";

/** Reading a run back from a `dir:` share (transport-dir.ts), through descriptors only. */

/** A file of a run directory held open for reading back (never through a symlink, only a regular file). */
function holdFarSideFile(
  at: string,
  refuse: (failure: ReadFailure, details: Record<string, unknown>) => OatsError,
): { held: HeldFile; size: number } {
  let opened: ReturnType<typeof openNamedPath>;
  try {
    opened = openNamedPath(at);
  } catch (error) {
    const code = errnoCode(error);
    throw refuse(code === "ENOENT" ? "missing" : code === "ELOOP" ? "symlink" : "unreadable", { errno: code });
  }
  if (!opened.stats.isFile()) {
    closeSync(opened.fd);
    throw refuse("not-a-file", {});
  }
  return { held: new HeldFile(opened.fd, at), size: opened.stats.size };
}

/**
 * Open the run directory through descriptors only and every file in it (O_NOFOLLOW, a regular file, held by its
 * descriptor: read through it alone); null when the share holds nothing for the id.
 */
export async function openShareRun(share: string, runId: string): Promise<FarSideRun | null> {
  const to = `dir:${share}`;
  const hex = runHex(runId);
  let shareFd: number | null = null;
  let runsFd: number | null = null;
  let runFd: number | null = null;
  const held: HeldFile[] = [];
  let handed = false;
  try {
    shareFd = openShareRoot(share);
    runsFd = openShareRuns(share, shareFd, false);
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
    const files = new Map<string, FarSideFile>();
    for (const name of readdirSync(inDirectory(runFd, dirPath, "")).sort()) {
      const file = holdFarSideFile(
        inDirectory(runFd, dirPath, name),
        (failure, details) =>
          new OatsError("integrity-mismatch", `cannot read ${name} of run ${runId} back from ${to}: ${failure}`, {
            to,
            runId,
            file: name,
            reason: failure,
            ...details,
          }),
      );
      held.push(file.held);
      files.set(name, {
        size: file.size,
        stream: async () => file.held.stream(),
        pieces: (limit, consume) => readPieces(file.held.fd, limit, consume),
      });
    }
    handed = true;
    return { files, close: async () => void (await Promise.all(held.map((file) => file.close()))) };
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw shareError(share, "run directory", error, { runId });
  } finally {
    if (!handed) await Promise.all(held.map((file) => file.close()));
    closeQuietly(runFd);
    closeQuietly(runsFd);
    closeQuietly(shareFd);
  }
}

/** Every file of the run directory whole (at most READ_BACK_LIMIT bytes each). */
export async function readShareRun(share: string, runId: string): Promise<Map<string, Buffer> | null> {
  const to = `dir:${share}`;
  const there = await openShareRun(share, runId);
  if (there === null) return null;
  return readFarSideRun(there, { to, runId }, (name) => ({
    code: "integrity-mismatch",
    message: `cannot read ${name} of run ${runId} back from ${to}: too-large`,
  }));
}
