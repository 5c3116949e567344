import { properLockfile } from "./lockfile.js";
import {
  closeSync,
  constants,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../../core/index.js";
import { ensureDirectory, ensureGitignore, inspectStoreAt, removeCreatedStore, resolveScope } from "./components.js";
import { writeNewFileDurably } from "./files.js";
import { AGENTS_DIR, MANAGED_GITIGNORE, hostTag, stagingName } from "./layout.js";
import { DEFAULT_LOCK_WAIT_MS, withFileLock } from "./publish-lock.js";
import { randomBytes } from "node:crypto";

/**
 * The protocol between gc and publishers (docs/design/lifecycle.md).
 *
 * A publisher (retain, prepare, capture prepare, import, a record, blob,
 * instance ref or job, a pin, a repair) holds a *lease* for as long as
 * anything it found or wrote is not yet reachable from a root: a file
 * `.agents/leases/<host>-<pid>-<random>.lease`. gc deletes only while it
 * holds the scope's *gc lock* (`.agents/gc.lock`, proper-lockfile) and has
 * seen no live lease after taking it.
 *
 * Publisher: (1) create the lease file; (2) if the gc lock is held, remove
 * the lease, wait and start again; otherwise it has *passed* and works.
 * gc: (1) take the gc lock; (2) list the leases; delete only when none is live.
 *
 * Why a record that commits has everything it names: take any publisher
 * attempt that passed and any gc that deleted. If the publisher's lease was
 * created before gc listed the leases, gc saw it (it lives until the
 * publisher ends) and deleted nothing. Otherwise the lease came after the
 * listing, which came after gc took its lock, so the publisher's check came
 * while gc still held the lock and it did not pass. So no publisher works
 * while gc deletes, and a gc that starts later sees the lease until the
 * record and its reference are committed, after which they are roots.
 *
 * Within one process the leases of a scope are shared: one file, counted,
 * and passing once covers every operation while the file exists (the
 * argument above only needs *a* lease of this process to exist
 * continuously).
 */

export const LEASES_DIR: readonly string[] = [AGENTS_DIR, "leases"];
export const GC_LOCK = "gc.lock";
const LEASE_NAME = /^([0-9a-f]{8})-([0-9]+)-[0-9a-f]{12}\.lease$/;
const STALE_MS = 10_000;
const POLL_MS = 25;
/** Tries to create a lease while other processes take the empty leases directory back. */
const LEASE_ATTEMPTS = 100;
/** A lease of another host (a shared filesystem) cannot be checked for liveness; it counts as live for this long. */
export const FOREIGN_LEASE_MS = 24 * 60 * 60 * 1000;

interface Held {
  count: number;
  path: string | null;
  created: string[];
  passed: boolean;
  ready: Promise<void> | null;
}

const held = new Map<string, Held>();

function gcTarget(realScope: string): { target: string; lockfilePath: string } {
  return { target: join(realScope, AGENTS_DIR, "gc"), lockfilePath: join(realScope, AGENTS_DIR, GC_LOCK) };
}

function gcLockHeld(realScope: string): boolean {
  const { target, lockfilePath } = gcTarget(realScope);
  try {
    return properLockfile().checkSync(target, { lockfilePath, stale: STALE_MS, realpath: false });
  } catch (error) {
    if (errnoCode(error) === "ENOENT" || errnoCode(error) === "ENOTDIR") return false;
    throw error;
  }
}

/**
 * Create this process's lease file. A scope where it cannot be created (no
 * write access, a read-only store, a damaged `.agents`) gets no lease: the
 * publication then meets the same problem and refuses in its own terms, and
 * gc refuses a leases directory it cannot trust, so nothing is unprotected.
 *
 * The leases directory exists only while someone holds a lease: the last
 * holder takes it back when only its `.gitignore` is left (dropLease). So it
 * is never created empty and filled afterwards, which a take-back could win
 * every time: a publisher that finds no leases directory builds one in a
 * staging directory beside it, `.gitignore` and its own lease inside, and
 * renames it into place. From the moment the directory has its name it holds
 * a lease, so no take-back can remove it under the publisher.
 */
function createLease(realScope: string, entry: Held): void {
  const agents = join(realScope, AGENTS_DIR);
  const dir = join(realScope, ...LEASES_DIR);
  for (let attempt = 0; attempt < LEASE_ATTEMPTS; attempt++) {
    const name = `${hostTag()}-${process.pid}-${randomBytes(6).toString("hex")}.lease`;
    try {
      if (ensureDirectory(agents) && !entry.created.includes(agents)) entry.created.push(agents);
      if (inspectStoreAt(realScope, LEASES_DIR).complete && openLease(join(dir, name))) {
        entry.path = join(dir, name);
        // Our lease keeps the directory now; complete a .gitignore that a crashed take-back left out.
        ensureGitignore(dir);
        return;
      }
      if (publishLeasesDirectory(agents, dir, name)) {
        if (!entry.created.includes(dir)) entry.created.push(dir);
        entry.path = join(dir, name);
        return;
      }
    } catch (error) {
      // `.agents` taken back by the process that created it: start again.
      if (errnoCode(error) === "ENOENT") continue;
      entry.path = null;
      return;
    }
  }
  throw new OatsError(
    "busy",
    `could not create a lease in ${dir}: the directory kept changing under ${LEASE_ATTEMPTS} attempts`,
    { path: dir },
  );
}

/** Create the lease file `path`; false when its directory is gone (taken back meanwhile). */
function openLease(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return false;
    throw error;
  }
  // Not fsync'd: gc tells a lease by its name, which every process sees once open() returns; only a crash
  // could lose it, and a crash leaves no process for the lease to protect (about 1 ms of each retain).
  try {
    writeSync(fd, `${JSON.stringify({ pid: process.pid, host: hostTag(), at: new Date().toISOString() })}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Build a leases directory holding the managed `.gitignore` (fsync'd: a torn
 * one would make the store refuse) and the lease `name`, and rename it to
 * `dir`. False when another publisher's directory got there first (rename
 * refuses a directory that is not empty); the staged one is removed.
 */
function publishLeasesDirectory(agents: string, dir: string, name: string): boolean {
  const staged = join(agents, stagingName());
  mkdirSync(staged, { mode: 0o755 });
  try {
    writeNewFileDurably(join(staged, ".gitignore"), MANAGED_GITIGNORE, 0o644);
    openLease(join(staged, name));
    renameSync(staged, dir);
    return true;
  } catch (error) {
    rmSync(staged, { recursive: true, force: true });
    const errno = errnoCode(error);
    if (errno === "ENOTEMPTY" || errno === "EEXIST") return false;
    throw error;
  }
}

/**
 * Drop this process's lease. The last use (`final`) also takes back the
 * leases directory when no lease is left in it, whoever created it: the
 * directory exists only while someone holds a lease, so a publication that
 * was refused leaves the store as it found it even when it raced another
 * publisher (only the creator used to remove it, and only when it was empty
 * at that moment, so the last one out left it behind). `.agents` itself is
 * taken back, when empty, only by the process that created it.
 */
function dropLease(realScope: string, entry: Held, final: boolean): void {
  if (entry.path) {
    try {
      unlinkSync(entry.path);
    } catch {
      // already gone
    }
    entry.path = null;
  }
  if (final) {
    const dir = join(realScope, ...LEASES_DIR);
    try {
      removeCreatedStore([...entry.created.filter((path) => path !== dir), dir], dir);
    } catch {
      // another publisher's lease keeps it
    }
    entry.created = [];
  }
}

function busy(realScope: string, waitMs: number): OatsError {
  return new OatsError("busy", `gc holds the lock of scope ${realScope}; gave up after ${waitMs} ms`, {
    lock: gcTarget(realScope).lockfilePath,
    waitedMs: waitMs,
  });
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Steps (1) and (2) of the publisher, retried until the gc lock is free. */
function attempt(realScope: string, entry: Held): boolean {
  createLease(realScope, entry);
  if (!gcLockHeld(realScope)) return true;
  dropLease(realScope, entry, false);
  return false;
}

function enter(scope: string): { realScope: string; entry: Held } {
  const realScope = resolveScope(scope);
  let entry = held.get(realScope);
  if (!entry) {
    entry = { count: 0, path: null, created: [], passed: false, ready: null };
    held.set(realScope, entry);
  }
  entry.count += 1;
  return { realScope, entry };
}

function leave(realScope: string, entry: Held): void {
  entry.count -= 1;
  if (entry.count > 0) return;
  held.delete(realScope);
  dropLease(realScope, entry, true);
}

/** Hold a publish lease of `scope` around `body` (see above). */
export async function withPublishLease<T>(
  scope: string,
  body: () => Promise<T>,
  waitMs = DEFAULT_LOCK_WAIT_MS,
): Promise<T> {
  const { realScope, entry } = enter(scope);
  try {
    if (!entry.passed) {
      entry.ready ??= (async () => {
        const deadline = Date.now() + waitMs;
        while (!attempt(realScope, entry)) {
          if (Date.now() > deadline) throw busy(realScope, waitMs);
          await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        }
        entry.passed = true;
      })();
      try {
        await entry.ready;
      } catch (error) {
        entry.ready = null;
        throw error;
      }
    }
    return await body();
  } finally {
    leave(realScope, entry);
  }
}

/** withPublishLease for the synchronous publishers (records, blobs, refs). */
export function withPublishLeaseSync<T>(scope: string, body: () => T, waitMs = DEFAULT_LOCK_WAIT_MS): T {
  const { realScope, entry } = enter(scope);
  try {
    if (!entry.passed) {
      const deadline = Date.now() + waitMs;
      while (!attempt(realScope, entry)) {
        if (Date.now() > deadline) throw busy(realScope, waitMs);
        sleepSync(POLL_MS);
      }
      entry.passed = true;
    }
    return body();
  } finally {
    leave(realScope, entry);
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errnoCode(error) === "EPERM";
  }
}

export interface LeaseState {
  readonly live: string[];
  /** Leases of processes that are gone (or foreign ones past FOREIGN_LEASE_MS), ignored. */
  readonly abandoned: string[];
}

/**
 * The leases of a scope. A lease of this host is live while its process
 * lives; a lease of another host while younger than FOREIGN_LEASE_MS; a
 * name that is not a lease is treated as live (gc cannot tell it is not
 * one). A leases directory that is a symlink or not a directory refuses.
 */
export function listLeases(realScope: string): LeaseState {
  if (!inspectStoreAt(realScope, LEASES_DIR).complete) return { live: [], abandoned: [] };
  const dir = join(realScope, ...LEASES_DIR);
  const here = hostTag();
  const live: string[] = [];
  const abandoned: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (error) {
    // The publisher that created the directory took it back with its last lease.
    if (errnoCode(error) === "ENOENT") return { live: [], abandoned: [] };
    throw error;
  }
  for (const name of names.sort()) {
    if (name === ".gitignore") continue;
    const path = join(dir, name);
    const match = LEASE_NAME.exec(name);
    if (!match) {
      live.push(path);
      continue;
    }
    let alive: boolean;
    if (match[1] === here)
      alive = Number(match[2]) === process.pid ? held.has(realScope) : processAlive(Number(match[2]));
    else {
      try {
        alive = Date.now() - lstatSync(path).mtimeMs < FOREIGN_LEASE_MS;
      } catch {
        continue;
      }
    }
    (alive ? live : abandoned).push(path);
  }
  return { live, abandoned };
}

/**
 * Run `body` holding the gc lock, once no live lease is left. Publishers
 * that arrive meanwhile wait (they see the lock); those already working
 * finish and drop their leases. `busy` when they do not within `waitMs`.
 * `stillHeld()` throws if the lock was lost, so a deleter stops at once.
 */
export async function withGcLock<T>(
  scope: string,
  waitMs: number,
  body: (stillHeld: () => void) => Promise<T>,
): Promise<T> {
  const realScope = resolveScope(scope);
  inspectStoreAt(realScope, LEASES_DIR);
  const { target, lockfilePath } = gcTarget(realScope);
  return withFileLock(
    {
      target,
      lockfilePath,
      waitMs,
      minTimeout: 50,
      maxTimeout: 500,
      factor: 1.5,
      failure: (error) =>
        error instanceof OatsError
          ? error
          : new OatsError(
              "busy",
              `the gc lock of ${realScope} was lost or could not be taken: ` +
                `${String((error as Error)?.message ?? error)}`,
              { lock: lockfilePath },
            ),
    },
    async (stillHeld) => {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const { live, abandoned } = listLeases(realScope);
        // A crashed publisher's lease is ignored; removing it keeps the directory from growing.
        for (const path of abandoned) {
          try {
            unlinkSync(path);
          } catch {
            // another gc took it
          }
        }
        if (live.length === 0) break;
        if (Date.now() > deadline)
          throw new OatsError(
            "busy",
            `${live.length} publisher${live.length === 1 ? "" : "s"} still in flight ` +
              `in ${realScope}; gave up after ${waitMs} ms`,
            { leases: live, waitedMs: waitMs },
          );
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
      stillHeld();
      return body(stillHeld);
    },
  );
}
