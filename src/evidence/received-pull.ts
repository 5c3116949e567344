import { chmodSync, closeSync, constants, fsync, lstatSync, mkdirSync, openSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { OatsError, bytesDigest, bytesDigester, errnoCode, canonicalJsonBytes } from "../core/index.js";
import { audit } from "../ledger/index.js";
import { readAnchoredAudit } from "./anchored-audit.js";
import {
  ensureStoreAt,
  fsyncDirectory,
  resolveScope,
  readRegularFileInPieces,
  removeCreatedStore,
  writeNewFileDurably,
  writeRestSync,
  assertContained,
  stagingName,
} from "../retention/index.js";
import { digestFarSideFile, farSideRunOf, readFarSideFile, type FarSideFile } from "./evidence-file.js";
import {
  checkReceivedHead,
  checkReceivedNames,
  receivedLogChecker,
  RECEIVED_FILES,
  type ReceivedHead,
  type ReceivedRunCheck,
} from "./received-check.js";
import {
  ORIGIN_FILE,
  RECEIVED_STORE,
  SMALL_FILE_LIMIT,
  readReceivedFile,
  receiptOf,
  receivedDigests,
  receivedFileNames,
  receivedRoot,
  storeError,
} from "./received-store.js";
import { runHex, runIdFromHex } from "./run-id.js";
import { transportFor } from "./transport.js";

/**
 * `oats pull … --run`: a run brought from a far side into the received
 * store (received-store.ts). Everything is read from the far side through
 * the transport's openBack (OCI digests checked as the blobs stream).
 * record.json and audit.jsonl are read whole (at most SMALL_FILE_LIMIT
 * bytes each) and checked (received-check.ts) before anything in the scope
 * is touched. The log is never held: it streams from the far side into the
 * staging directory (0700, every file O_EXCL|O_NOFOLLOW and fsync'd)
 * through the transport's bounded chunks, hashed and checked on the way,
 * and only a log that is exactly the one the record seals is renamed into
 * place with the rest; any refusal removes the staging directory and the
 * store directories this pull created, so the scope is as it was. A rename
 * never replaces a non-empty directory, so a run already present is
 * compared instead (by digest, its log streamed): the same evidence bytes
 * are `kept`, other bytes are `integrity-mismatch` and nothing is replaced.
 */

export interface ReceiveOptions {
  readonly insecure?: boolean;
}

export interface ReceiveReport {
  readonly runId: string;
  readonly from: string;
  readonly status: "written" | "kept";
  readonly handle: string;
  readonly job: string;
  readonly result: string;
  readonly logLines: number;
  readonly auditLines: number;
  /** Always false: the sending host's audit chain is not available here (see received-check.ts). */
  readonly auditChainVerified: false;
}

function writeNew(path: string, bytes: Buffer): void {
  writeNewFileDurably(path, bytes, 0o600);
}

/** Whether the anchored audit log already names these bytes as received (a chain that cannot be read: no). */
function hasReceipt(realScope: string, check: ReceivedRunCheck): boolean {
  try {
    return receiptOf(readAnchoredAudit(realScope), check.runId, receivedDigests(check)) !== null;
  } catch {
    return false;
  }
}

/** Compare a run directory already in place with these digests (its log streamed): kept, or integrity-mismatch. */
function compareExisting(dir: string, runId: string, digests: Record<string, string>, from: string): "kept" {
  const names = receivedFileNames(dir).sort();
  const same =
    names.length === RECEIVED_FILES.length &&
    names.every((name, index) => name === RECEIVED_FILES[index]) &&
    bytesDigest(readReceivedFile(dir, "record.json")) === digests["record.json"] &&
    bytesDigest(readReceivedFile(dir, "audit.jsonl")) === digests["audit.jsonl"] &&
    digestAtRest(join(dir, "log")) === digests["log"];
  if (same) return "kept";
  throw new OatsError(
    "integrity-mismatch",
    `this scope already holds received run ${runId} with other content; nothing was replaced`,
    { runId, from, reason: "other-content" },
  );
}

function digestAtRest(path: string): string {
  const digester = bytesDigester();
  readRegularFileInPieces(
    path,
    { limit: Number.MAX_SAFE_INTEGER, refuse: (failure, details) => storeError(path, failure, details) },
    (piece) => digester.update(piece),
  );
  return digester.digest();
}

/**
 * Stream the far side's log through the transport's chunks, checked as it passes, into `path` when given (a new
 * file, O_EXCL|O_NOFOLLOW, fsync'd).
 */
async function receiveLog(path: string | null, head: ReceivedHead, log: FarSideFile): Promise<ReceivedRunCheck> {
  const checker = receivedLogChecker(head);
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  const fd = path === null ? null : openSync(path, flags, 0o600);
  try {
    // One byte past the record's size is enough to refuse it: a far side that streams on is not read further.
    const streamed = await digestFarSideFile(log, head.record.log.bytes, (chunk) => {
      checker.update(chunk);
      if (fd !== null) writeRestSync(fd, chunk);
    });
    const check = checker.finish(streamed.bytes);
    // In the thread pool: flushing gigabytes does not hold the event loop.
    if (fd !== null) await promisify(fsync)(fd);
    return check;
  } finally {
    if (fd !== null) closeSync(fd);
  }
}

/**
 * Publish a received run into the scope (the only writing step): its log
 * streamed from the far side into the staging directory, checked on the
 * way; a run already in place is compared instead. Any refusal takes back
 * what this call created.
 */
async function publishReceived(
  realScope: string,
  head: ReceivedHead,
  log: FarSideFile,
  from: string,
): Promise<{ status: "written" | "kept"; check: ReceivedRunCheck }> {
  const root = receivedRoot(realScope);
  const dir = assertContained(root, join(root, head.runId), `received run ${head.runId}`);
  let present = true;
  try {
    lstatSync(dir);
  } catch (error) {
    if (errnoCode(error) !== "ENOENT") throw error;
    present = false;
  }
  if (present) {
    // Checked whole before it is compared: a far side's damaged copy is refused as such, not as other content.
    const check = await receiveLog(null, head, log);
    return { status: compareExisting(dir, head.runId, receivedDigests(check), from), check };
  }
  const created = ensureStoreAt(realScope, RECEIVED_STORE);
  const staging = join(root, stagingName());
  let placed = false;
  try {
    mkdirSync(staging, { mode: 0o700 });
    chmodSync(staging, 0o700);
    writeNew(join(staging, "record.json"), head.recordBytes);
    writeNew(join(staging, "audit.jsonl"), head.auditBytes);
    const check = await receiveLog(join(staging, "log"), head, log);
    writeNew(
      join(staging, ORIGIN_FILE),
      canonicalJsonBytes({ format: "oats.received-run.v1", from, runId: head.runId }),
    );
    fsyncDirectory(staging);
    try {
      renameSync(staging, dir);
      placed = true;
    } catch (error) {
      // Another puller won the race: its directory decides (same bytes kept, other bytes refused).
      if (errnoCode(error) === "ENOTEMPTY" || errnoCode(error) === "EEXIST") {
        placed = true;
        return { status: compareExisting(dir, head.runId, receivedDigests(check), from), check };
      }
      throw error;
    }
    fsyncDirectory(root);
    return { status: "written", check };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    if (!placed) removeCreatedStore(created, root);
  }
}

/**
 * `oats pull <far side> --run <id>`: read the run from the far side
 * (transport readBack), check it, and only then publish it into the scope.
 * Any refusal leaves the scope byte-for-byte as it was.
 */
export async function receiveRun(
  scope: string,
  from: string,
  runRef: string,
  options: ReceiveOptions = {},
): Promise<ReceiveReport> {
  const realScope = resolveScope(scope);
  const runId = runIdFromHex(runHex(runRef));
  const transport = transportFor(from, {
    allowSameFilesystem: true,
    ...(options.insecure === true ? { insecure: true } : {}),
  });
  const where = transport.describe();
  const back =
    transport.openBack !== undefined
      ? await transport.openBack(runId)
      : await transport.readBack(runId).then((files) => (files === null ? null : farSideRunOf(files)));
  if (back === null)
    throw new OatsError("run-not-found", `${where} holds no run ${runId}`, {
      runId,
      from: where,
      reason: "run-not-found",
    });
  let received: { status: "written" | "kept"; check: ReceivedRunCheck };
  try {
    checkReceivedNames(runId, [...back.files.keys()], where);
    const small = (name: string) =>
      readFarSideFile(
        back.files.get(name)!,
        SMALL_FILE_LIMIT,
        (size) =>
          new OatsError(
            "invalid-artifact",
            `run ${runId} from ${where}: ${name} is larger than ${SMALL_FILE_LIMIT} bytes`,
            {
              runId,
              from: where,
              file: name,
              size,
              limit: SMALL_FILE_LIMIT,
              reason: "too-large",
            },
          ),
      );
    const head = checkReceivedHead(runId, await small("record.json"), await small("audit.jsonl"), where);
    received = await publishReceived(realScope, head, back.files.get("log")!, where);
  } finally {
    await back.close();
  }
  const { status, check } = received;
  const { record } = check;
  // Written once the run is in place: a received run no entry names is never taken as received, so an entry that
  // cannot be written leaves nothing trusted behind (pull again once the audit log can take it). A run kept as it
  // was, with its entry already there, changes nothing.
  if (status === "written" || !hasReceipt(realScope, check))
    await audit(realScope, {
      action: "run-receive",
      subject: { runId, handle: record.handle },
      outcome: status === "written" ? "ok" : "kept",
      details: { from: where, files: receivedDigests(check) },
    });
  return {
    runId,
    from: where,
    status,
    handle: record.handle,
    job: record.job,
    result: record.result,
    logLines: record.log.lines,
    auditLines: check.auditLines,
    auditChainVerified: false,
  };
}
