import { createHash, type Hash } from "node:crypto";
import { join } from "node:path";
import { errnoCode } from "../../core/index.js";
import type { FileConsumer, FileEntry, FileInfo, SymlinkEntry } from "../../engine/index.js";
import { hashFilesHere, type FileHash } from "../parallel/file-hashes.js";
import { acquireWorker, parallelism, releaseWorker, type DigestWorker } from "../parallel/pool.js";
import type { ManifestRecorder } from "./manifest-encoding.js";
import { FALLBACK_CODES, heldPath, linkNew } from "./shared-layer.js";
import type { StagingWriter } from "./staging-writer.js";

/**
 * The copy pass of a publication into the shared file layer: a small file
 * (handed over whole) whose content the layer already holds is not written
 * at all, but linked from its held file, which is hashed first (once per
 * publication) and linked only if it verifies; everything else is written by
 * the staging writer as before, and shared after the read-back
 * (shareStagedTree). Writing a copy only to replace it by a link costs more
 * than the copy: freeing a just-written file's blocks is the slowest step
 * of a link-over on the filesystems measured.
 *
 * The held files are hashed in a worker lane while this thread goes on
 * reading the source (with one core, here, at once): a file whose held file
 * is being hashed waits, its bytes kept, until the verdict comes back; it
 * is then linked (verified) or written from its bytes (not verified: the
 * staged copy replaces the damaged held file in shareStagedTree). The
 * waiting bytes are bounded (MAX_WAITING_BYTES); past that the pass waits
 * for the oldest verdicts.
 *
 * With `record`, the pass also measures the source's manifest rows (each
 * file's SHA-256, computed once for the link and the row) and what it
 * wrote, so that the staged tree can be checked by structure where it is
 * made of links (staged-check.ts).
 */

/** Held files sent to the worker in one message. */
const CHECK_BATCH = 128;
/** Bytes of waiting files kept before the pass waits for verdicts. */
const MAX_WAITING_BYTES = 16 << 20;

interface Waiting {
  readonly entry: FileEntry;
  readonly info: FileInfo;
  readonly data: Buffer;
  readonly sha256: string;
}

interface HeldCheck {
  readonly held: string;
  readonly sha256: string;
  readonly size: number;
  readonly exec: boolean;
  readonly waiting: Waiting[];
}

interface Batch {
  readonly checks: HeldCheck[];
  /** Settled when the worker answered (or failed). */
  readonly done: Promise<void>;
  answer?: (FileHash | null)[];
  error?: unknown;
}

/** What the pass measured of a file it wrote: the read-back hashes it again. */
export interface WrittenFile {
  readonly sha256: string;
  readonly size: number;
  readonly exec: boolean;
}

/** A held file verifies for a source file: same SHA-256, size and exec bit. */
export function heldVerifies(found: FileHash | null, sha256: string, size: number, exec: boolean): boolean {
  return found !== null && found.sha256 === sha256 && found.size === size && ((found.mode & 0o100) !== 0) === exec;
}

export class SharingWriter implements FileConsumer {
  /** Paths (relative) linked from a verified held file during the pass, with what that file's verification saw. */
  readonly linked = new Map<string, FileHash>();
  /** With `record`: the files the pass wrote, as it measured them from the source. */
  readonly written = new Map<string, WrittenFile>();
  /** The first errno of a link the filesystem refused. */
  fallback: string | null = null;
  /** Held file to its verdict: what its hash saw when it verified, false when it did not. */
  private readonly verdicts = new Map<string, FileHash | false>();
  private readonly checking = new Map<string, HeldCheck>();
  private unsent: HeldCheck[] = [];
  private readonly batches: Batch[] = [];
  private waitingBytes = 0;
  private worker: DigestWorker | null = null;
  private fileHash: Hash | null = null;

  constructor(
    private readonly scope: string,
    private readonly staging: string,
    private readonly inner: StagingWriter,
    /** Feed the source's manifest rows here (tree-exec order: the pass's order must be "bytes"). */
    private readonly rows: ManifestRecorder | null = null,
  ) {}

  whole(entry: FileEntry, info: FileInfo, data: Buffer): void | Promise<void> {
    const exec = (info.mode & 0o100) !== 0;
    const sha256 = createHash("sha256").update(data).digest("hex");
    this.rows?.record({ path: entry.path, type: "file", exec, size: data.length, sha256 });
    if (this.fallback === null) {
      const held = heldPath(this.scope, sha256, exec);
      const verdict = this.verdicts.get(held);
      if (verdict && this.linkVerified(held, verdict, entry.path)) return this.afterFile();
      if (verdict === undefined) {
        // Whether it is held at all is the lane's to find (an open that fails): a lookup here cost a syscall a file.
        const check = this.checking.get(held) ?? this.newCheck(held, sha256, exec, data);
        // The reader reuses its buffer for the next file.
        check.waiting.push({ entry, info, data: Buffer.from(data), sha256 });
        this.waitingBytes += data.length;
        return this.afterFile();
      }
    }
    const wrote = this.write(entry, info, data, sha256);
    return wrote ? wrote.then(() => this.afterFile()) : this.afterFile();
  }

  private newCheck(held: string, sha256: string, exec: boolean, data: Buffer): HeldCheck {
    const check: HeldCheck = { held, sha256, size: data.length, exec, waiting: [] };
    this.checking.set(held, check);
    this.unsent.push(check);
    return check;
  }

  /** Link a verified held file at `path`; false when the filesystem refused (the pass then writes copies). */
  private linkVerified(held: string, found: FileHash, path: string): boolean {
    if (this.fallback !== null) return false;
    try {
      linkNew(held, join(this.staging, path));
      this.linked.set(path, found);
      return true;
    } catch (error) {
      const code = errnoCode(error);
      if (!code || !FALLBACK_CODES.has(code)) throw error;
      this.fallback = code;
      return false;
    }
  }

  private write(entry: FileEntry, info: FileInfo, data: Buffer, sha256: string): void | Promise<void> {
    if (this.rows) this.written.set(entry.path, { sha256, size: data.length, exec: (info.mode & 0o100) !== 0 });
    this.inner.start(entry);
    const chunked = data.length > 0 ? this.inner.chunk(data) : undefined;
    return chunked ? chunked.then(() => this.inner.end(entry, info)) : this.inner.end(entry, info);
  }

  /** Between two files: send a full batch, take the verdicts that are in, wait for some when too much waits. */
  private afterFile(): void | Promise<void> {
    if (this.unsent.length >= CHECK_BATCH) this.send();
    const settled = this.takeVerdicts();
    if (settled) return settled.then(() => this.relieve());
    return this.relieve();
  }

  private relieve(): void | Promise<void> {
    if (this.waitingBytes <= MAX_WAITING_BYTES) return;
    if (this.unsent.length > 0) this.send();
    return this.batches[0]!.done.then(() => this.takeVerdicts()).then(() => this.relieve());
  }

  private send(): void {
    const checks = this.unsent;
    this.unsent = [];
    const paths = checks.map((check) => check.held);
    if (this.worker === null && parallelism() > 1) this.worker = acquireWorker();
    if (this.worker === null) {
      this.batches.push({ checks, done: Promise.resolve(), answer: hashFilesHere(paths) });
      return;
    }
    const batch: { -readonly [K in keyof Batch]: Batch[K] } = { checks, done: Promise.resolve() };
    batch.done = this.worker.hashFiles(paths).then(
      (answer) => {
        batch.answer = answer;
      },
      (error: unknown) => {
        batch.error = error;
      },
    );
    this.batches.push(batch);
  }

  /** Act on every answered batch, oldest first: link the verified, write the others from their bytes. */
  private takeVerdicts(): void | Promise<void> {
    const copies: Waiting[] = [];
    while (this.batches.length > 0) {
      const batch = this.batches[0]!;
      if (batch.error !== undefined) throw batch.error;
      if (!batch.answer) break;
      this.batches.shift();
      batch.checks.forEach((check, index) => {
        const found = batch.answer![index] ?? null;
        const verdict = heldVerifies(found, check.sha256, check.size, check.exec) ? found! : false;
        // An absent file may be stored by this very publication later (shareStagedTree): asked again then, not here.
        if (found !== null) this.verdicts.set(check.held, verdict);
        this.checking.delete(check.held);
        for (const waiting of check.waiting) {
          this.waitingBytes -= waiting.data.length;
          if (!verdict || !this.linkVerified(check.held, verdict, waiting.entry.path)) copies.push(waiting);
        }
      });
    }
    if (copies.length === 0) return;
    return (async () => {
      for (const copy of copies) await this.write(copy.entry, copy.info, copy.data, copy.sha256);
    })();
  }

  /** After the pass: every held file checked, every waiting file linked or written. */
  async finish(): Promise<void> {
    if (this.unsent.length > 0) this.send();
    while (this.batches.length > 0) {
      await this.batches[0]!.done;
      await this.takeVerdicts();
    }
  }

  /** Hand the worker back (after finish, or after a failed pass). */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    if (worker) await releaseWorker(worker);
  }

  start(entry: FileEntry): void {
    if (this.rows) this.fileHash = createHash("sha256");
    this.inner.start(entry);
  }
  chunk(data: Buffer): void | Promise<void> {
    this.fileHash?.update(data);
    return this.inner.chunk(data);
  }
  end(entry: FileEntry, info: FileInfo): void | Promise<void> {
    if (this.rows && this.fileHash) {
      const row = { sha256: this.fileHash.digest("hex"), size: info.size, exec: (info.mode & 0o100) !== 0 };
      this.fileHash = null;
      this.rows.record({ path: entry.path, type: "file", ...row });
      this.written.set(entry.path, row);
    }
    return this.inner.end(entry, info);
  }
  symlink(entry: SymlinkEntry): void {
    this.rows?.record({ path: entry.path, type: "symlink", target: entry.target });
    this.inner.symlink(entry);
  }
}
