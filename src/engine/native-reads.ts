import { createRequire } from "node:module";
import { getSystemErrorName } from "node:util";

/**
 * The addon built from native/*.c (dist/native/oats.node), when the build
 * could compile it: the small-file reads of native/read-small.c, up to
 * 128 files per call, the directory calls of the walk
 * (native/directories.c, native-directories.ts), the read-ahead threads
 * of native/prefetch.c and native/warm-directories.c (prefetch.ts says why
 * those) and the ring of native/read-ring.c (read-ring.ts).
 *
 * Why: a 2 KiB file costs five system calls, and from JavaScript each is a
 * binding call that allocates (a /proc/<pid>/fd/<dir>/<name> string whose
 * procfs lookup is dear, two Stats objects with four Dates each), so a warm
 * digest of 20,000 small files spent about 16 us a file on open, fstat,
 * read and close and their garbage. The C loop makes the same calls with
 * the same checks (openat on the directory's descriptor, which is what the
 * /proc path stands for) and hands back only offsets, sizes and modes
 * (docs/design/performance.md, "The native addon and its fallback").
 *
 * Nothing depends on it: without a C compiler at build time, on a platform
 * other than Linux, with OATS_NATIVE_READS=0 in the environment, or after
 * setNativeReads(false), file-reader.ts reads every file itself, the same
 * way. Tests run the reads both ways.
 */

/** Running read-ahead threads (native/prefetch.c, native/warm-directories.c). */
export type NativeThreads = { readonly __nativeThreads: unique symbol };

/** A reader thread's ring of slots (native/read-ring.c). */
export type NativeRing = { readonly __nativeRing: unique symbol };

export interface NativeAddon {
  /**
   * `dirFds`: one directory descriptor per name. `split`: a second thread reads beside this one (only where
   * a core would otherwise idle, and only for a long run).
   */
  readSmallFiles(
    dirFds: Int32Array,
    names: string[],
    buffer: Buffer,
    limit: number,
    meta: Float64Array,
    split: boolean,
    afterRead?: (index: number) => void,
  ): number;
  /** The block reads (512-byte units) of this thread's readSmallFiles calls so far, their second threads' included,
   * and of nothing else. */
  smallReadsBlockReads(): number;
  /** The block reads (512-byte units) of the calling thread since it started (getrusage RUSAGE_THREAD). */
  threadBlockReads(): number;
  /** A child directory opened inside its parent's descriptor (O_DIRECTORY | O_NOFOLLOW) and fstat'd into stat (dev,
   * ino, mode; the failed step): the fd, or -errno. */
  openDirectoryAt(parentFd: number, name: string, stat: Float64Array): number;
  /** Closes a descriptor openDirectoryAt gave (Node must not close what it did not open): 0 or -errno. */
  closeDirectory(fd: number): number;
  /** The entries of an open directory but . and ..: their names' bytes, each followed by a NUL, and their d_types; or
   * -errno. */
  listDirectory(fd: number): { names: Buffer; types: Uint8Array } | number;
  /** Leaf i's path is paths[ends[i - 1], ends[i]), empty for a leaf that is not a file. */
  startPrefetch(
    paths: Buffer,
    ends: Int32Array,
    from: number,
    threads: number,
    window: number,
    limit: number,
  ): NativeThreads;
  advancePrefetch(prefetch: NativeThreads, index: number): void;
  /** Lists every directory below rootFd (a copy of it: the caller may close its own) down to maxDepth. */
  warmDirectories(rootFd: number, threads: number, maxDepth: number): NativeThreads;
  /** The threads end after their current file or directory (garbage collection of the handle does the same); with
   * `wait`, it returns once they have. */
  stopThreads(threads: NativeThreads, wait?: boolean): void;
  threadsRunning(threads: NativeThreads): number;
  /** `slots` pieces of `slotSize` bytes, owned by the addon. */
  createRing(slots: number, slotSize: number): NativeRing;
  /** The ring's bytes; they stay valid as long as this Buffer lives. */
  ringMemory(ring: NativeRing): Buffer;
  /** A thread starts reading `length` bytes of `fd` from `position` into the slots; false when none could start. */
  ringRead(ring: NativeRing, fd: number, position: number, length: number): boolean;
  /** Gives back the slot returned before and waits for the next piece: its length (short at the end of the file), or
   * -errno. */
  ringNext(ring: NativeRing): number;
  /** Ends the read and waits for its thread: false if it did not end in time (it is then still reading). */
  ringStop(ring: NativeRing): boolean;
}

const FUNCTIONS = [
  "readSmallFiles",
  "smallReadsBlockReads",
  "threadBlockReads",
  "openDirectoryAt",
  "closeDirectory",
  "listDirectory",
  "startPrefetch",
  "advancePrefetch",
  "warmDirectories",
  "stopThreads",
  "threadsRunning",
  "createRing",
  "ringMemory",
  "ringRead",
  "ringNext",
  "ringStop",
] as const;

/** Four doubles a file: status, offset (or step, or what changed), size, mode. */
export const META_FIELDS = 4;
export const NOT_REGULAR = -1;
export const TOO_LARGE = -2;
export const SHORT = -3;
export const CHANGED = -4;

const STEPS = ["", "open", "fstat", "read", "close"] as const;
const CHANGES = ["", "inode", "size", "mtime", "ctime"] as const;

function load(): NativeAddon | null {
  if (process.platform !== "linux" || process.env.OATS_NATIVE_READS === "0") return null;
  try {
    // Spelled from the repository's root so it resolves from src/ (tests) and dist/ (the package) alike.
    const addon = createRequire(import.meta.url)("../../dist/native/oats.node") as Partial<NativeAddon>;
    return FUNCTIONS.every((name) => typeof addon[name] === "function") ? (addon as NativeAddon) : null;
  } catch {
    return null;
  }
}

/** Loaded on the first read, so a command that reads no tree never opens it. */
let addon: NativeAddon | null | undefined;
let enabled = true;

function loaded(): NativeAddon | null {
  if (addon === undefined) addon = load();
  return addon;
}

/** Whether this build has the native reads (tests: that CI really exercises them). */
export function nativeReadsAvailable(): boolean {
  return loaded() !== null;
}

/** Tests and the bench compare the two ways; without the addon the JavaScript reads run either way. */
export function setNativeReads(on: boolean): void {
  enabled = on;
}

export function nativeReads(): NativeAddon | null {
  return enabled ? loaded() : null;
}

/** An errno status as the error a failed fs call would have thrown (errnoCode reads its `code`). */
export function nativeError(errno: number, step: number): Error & { code: string; syscall: string } {
  const code = getSystemErrorName(-errno);
  const syscall = STEPS[step] ?? "read";
  return Object.assign(new Error(`${code}: ${syscall} failed`), { code, errno: -errno, syscall });
}

export function changeOf(what: number): string {
  return CHANGES[what] ?? "unknown";
}
