import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { fileURLToPath } from "node:url";
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
 * Nothing depends on it: it is compiled on the machine that runs it (by
 * `npm run build`, or the package's install script; the package ships the
 * sources, never the file), and without it (no C compiler at install,
 * install scripts off, a platform other than Linux, a file made for another
 * machine, OATS_NATIVE_READS=0 in the environment, or after
 * setNativeReads(false)) file-reader.ts reads every file itself, the same
 * way. The loader checks the file before the dynamic loader sees it and
 * keeps why it did not load (nativeReadsStatus). Tests run the reads both
 * ways.
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
  /** The entries of an open directory but . and ..: their names' bytes, each followed by a NUL, their d_types and
   * their d_inos (-1 past 2^53); or -errno. */
  listDirectory(fd: number): { names: Buffer; types: Uint8Array; inodes: Float64Array } | number;
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

/**
 * The Node-API version native/addon.h builds against (its NAPI_VERSION; a test
 * checks they agree). A Node with an older one would refuse the file at load;
 * the loader says so first, in words.
 */
export const NODE_API_VERSION = 8;

/** Where the build (scripts/build-native.mjs) puts the addon, from src/ (tests) and dist/ (the package) alike. */
export const ADDON_FILE = fileURLToPath(new URL("../../dist/native/oats.node", import.meta.url));

/**
 * Whether the native reads are in use, and if not why: `loaded`; `disabled`
 * (OATS_NATIVE_READS=0); `unsupported` (not Linux, whose system calls the C
 * makes); `missing` (never built here: no C compiler at install, or install
 * scripts were off); `refused` (a file that is not an addon for this
 * machine: not an ELF shared object, another architecture, a Node-API this
 * Node lacks, or without every function); `failed` (the dynamic loader or
 * the addon's own start refused it). In every case but `loaded` the library
 * reads every file from JavaScript, the same way, only slower. The library
 * never prints it; `oats doctor` does.
 */
export interface NativeReadsStatus {
  readonly state: "loaded" | "disabled" | "unsupported" | "missing" | "refused" | "failed";
  readonly file: string;
  /** Why the native reads are not in use (absent when they are). */
  readonly reason?: string;
}

/** ELF class (1: 32-bit, 2: 64-bit), byte order (1: little, 2: big) and e_machine of each architecture Node runs
 * on under Linux, by process.arch. */
const ELF_MACHINES: Record<string, readonly [number, number, number]> = {
  x64: [2, 1, 62],
  arm64: [2, 1, 183],
  ia32: [1, 1, 3],
  arm: [1, 1, 40],
  ppc64: [2, 1, 21],
  s390x: [2, 2, 22],
  riscv64: [2, 1, 243],
  loong64: [2, 1, 258],
  mips64el: [2, 1, 8],
};
const ELF_TYPE_SHARED = 3;

function machineName(elfClass: number, data: number, machine: number): string {
  const arch = Object.entries(ELF_MACHINES).find(([, [c, d, m]]) => c === elfClass && d === data && m === machine);
  return arch ? arch[0] : `ELF machine ${machine} (${elfClass === 1 ? "32" : "64"}-bit)`;
}

/** How much of the file the check reads: the ELF header and the program headers, which follow it. */
const HEAD_BYTES = 4096;

/**
 * Why a file that starts with `head` (its first bytes, up to HEAD_BYTES) and
 * is `size` bytes long is not a shared object this process can load, or
 * undefined when it may be: not ELF, not a shared object, made for another
 * architecture, or shorter than its own headers say. The dynamic loader
 * refuses the first three with a message that names no cause, and maps a
 * file cut short as it is, which kills the process with SIGBUS at the first
 * touch past its end: a file that is not whole must never reach it.
 */
export function addonHeaderProblem(
  head: Buffer,
  size: number = head.length,
  arch: string = process.arch,
): string | undefined {
  const cut = "not an ELF file (corrupt or truncated)";
  if (head.length < 52 || head.readUInt32BE(0) !== 0x7f454c46) return cut;
  const elfClass = head[4]!;
  const data = head[5]!;
  if ((elfClass !== 1 && elfClass !== 2) || (data !== 1 && data !== 2)) return cut;
  const wide = elfClass === 2;
  const read16 = (at: number) => (data === 2 ? head.readUInt16BE(at) : head.readUInt16LE(at));
  const read32 = (at: number) => (data === 2 ? head.readUInt32BE(at) : head.readUInt32LE(at));
  const readWord = (at: number) =>
    wide ? Number(data === 2 ? head.readBigUInt64BE(at) : head.readBigUInt64LE(at)) : read32(at);
  if (read16(16) !== ELF_TYPE_SHARED) return "not an ELF shared object";
  const expected = ELF_MACHINES[arch];
  const machine = read16(18);
  // An architecture this table lacks is left to the dynamic loader.
  if (expected !== undefined && (elfClass !== expected[0] || data !== expected[1] || machine !== expected[2]))
    return `built for ${machineName(elfClass, data, machine)}, and this is ${arch}`;
  if (wide && head.length < 64) return cut;
  const [programs, sections] = wide ? [readWord(32), readWord(40)] : [readWord(28), readWord(32)];
  const [programSize, programCount, sectionSize, sectionCount] = wide
    ? [read16(54), read16(56), read16(58), read16(60)]
    : [read16(42), read16(44), read16(46), read16(48)];
  const short = `truncated: ${size} bytes, and its headers describe more`;
  if (sections + sectionSize * sectionCount > size || programs + programSize * programCount > size) return short;
  if (programs + programSize * programCount > head.length) return undefined; // headers past the part read
  for (let index = 0; index < programCount; index++) {
    const at = programs + index * programSize;
    const [offset, length] = wide ? [readWord(at + 8), readWord(at + 32)] : [readWord(at + 4), readWord(at + 16)];
    if (offset + length > size) return short;
  }
  return undefined;
}

/** Reads and checks the file at `file`, then loads it: the addon, and the status either way. */
export function loadAddonFile(file: string): { addon: NativeAddon | null; status: NativeReadsStatus } {
  const refuse = (state: NativeReadsStatus["state"], reason: string) => ({
    addon: null,
    status: { state, file, reason },
  });
  let head: Buffer;
  let size: number;
  try {
    const fd = openSync(file, "r");
    try {
      size = fstatSync(fd).size;
      head = Buffer.alloc(Math.min(size, HEAD_BYTES));
      head = head.subarray(0, readSync(fd, head, 0, head.length, 0));
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT")
      return refuse("missing", "not built here (no C compiler at install, or install scripts were off)");
    return refuse("failed", `cannot read it: ${(error as Error).message}`);
  }
  const problem = addonHeaderProblem(head, size);
  if (problem !== undefined) return refuse("refused", problem);
  const nodeApi = Number(process.versions.napi);
  if (!(nodeApi >= NODE_API_VERSION))
    return refuse("refused", `it needs Node-API ${NODE_API_VERSION}, and this Node has ${process.versions.napi}`);
  let addon: Partial<NativeAddon>;
  try {
    // process.dlopen, not require: the file is an addon whatever its name ends with.
    const module = { exports: {} as Partial<NativeAddon> };
    process.dlopen(module, file);
    addon = module.exports;
  } catch (error) {
    return refuse("failed", (error as Error).message.split("\n")[0]!);
  }
  const lacking = FUNCTIONS.filter((name) => typeof addon[name] !== "function");
  if (lacking.length > 0) return refuse("refused", `a build without ${lacking.join(", ")}: run the build again`);
  return { addon: addon as NativeAddon, status: { state: "loaded", file } };
}

function load(): { addon: NativeAddon | null; status: NativeReadsStatus } {
  if (process.platform !== "linux")
    return {
      addon: null,
      status: { state: "unsupported", file: ADDON_FILE, reason: `${process.platform} is not Linux` },
    };
  if (process.env.OATS_NATIVE_READS === "0")
    return { addon: null, status: { state: "disabled", file: ADDON_FILE, reason: "OATS_NATIVE_READS=0" } };
  return loadAddonFile(ADDON_FILE);
}

/** Loaded on the first read, so a command that reads no tree never opens it; the outcome is decided once. */
let outcome: { addon: NativeAddon | null; status: NativeReadsStatus } | undefined;
let enabled = true;

function loaded(): NativeAddon | null {
  outcome ??= load();
  return outcome.addon;
}

/** Whether this build has the native reads (tests: that CI really exercises them). */
export function nativeReadsAvailable(): boolean {
  return loaded() !== null;
}

/** Whether the native reads are in use in this process, and if not why (loading them first if no read has). */
export function nativeReadsStatus(): NativeReadsStatus {
  loaded();
  return outcome!.status;
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
