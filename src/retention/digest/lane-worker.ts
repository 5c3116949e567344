import { appendFileSync } from "node:fs";
import { parentPort } from "node:worker_threads";
import { setReadHook } from "./read-hook.js";
import { DirectoryCursor } from "./directory-cursor.js";
import { execHeadLength, execSymlinkLength, writeExecHead, writeExecSymlink } from "./exec.js";
import { COLD_BLOCK_READS, readSmallFile } from "./file-reader.js";
import { AT, BUSY, BY_WORKER, CHUNK, CLAIMS, COLD, DONE, FREE, HOLDS, LEAF_WORDS, META_WORDS, PROGRESS, SIZES, SLOTS, SLOT_BYTES, STATE, STOP, UNCLAIMED, type LaneJob } from "./lane-protocol.js";
import type { DirectoryEntry, FileEntry } from "./walk.js";

/**
 * The second lane of a small-file digest (lanes.ts): it reads chunks of
 * small files ahead of the calling thread into shared slots. It reads each
 * file exactly as the calling thread would (readSmallFile: inside its
 * directory's descriptor, reopened from the root and checked against the
 * walk's device and inode by its own DirectoryCursor, O_NOFOLLOW, both
 * fstats). It takes no verdict: at the first leaf it cannot read cleanly
 * (anything refused, too large, a failure of any kind) it stops that chunk,
 * and the calling thread reads the rest of the chunk itself, refusing
 * exactly as a serial read would.
 */

/** A warm chunk of small files takes about 0.5 ms here; one from a cold disk ten times that. */
const SLOW_CHUNK_MS = 2;

/** The files of the job (undefined at a symlink's index) and, for records, every symlink's path. */
function rebuild(job: LaneJob): { files: FileEntry[]; linkPaths: string[] } {
  const root: DirectoryEntry = { type: "directory", name: "", path: "", absolute: job.root, children: [], parent: null, dev: job.rootDev, ino: job.rootIno, mode: 0 };
  const dirs: DirectoryEntry[] = [root];
  for (let i = 0; i < job.dirNames.length; i++) {
    const parent = dirs[job.dirParents[i]!]!;
    const name = job.dirNames[i]!;
    const path = parent.path ? `${parent.path}/${name}` : name;
    dirs.push({ type: "directory", name, path, absolute: `${job.root}/${path}`, children: [], parent, dev: job.dirDevs[i]!, ino: job.dirInos[i]!, mode: 0 });
  }
  const files: FileEntry[] = new Array(job.leafNames.length);
  const linkPaths: string[] = [];
  for (let i = 0; i < job.leafNames.length; i++) {
    const at = job.leafDirs[i]!;
    const parent = dirs[at < 0 ? -at - 1 : at]!;
    const name = job.leafNames[i]!;
    const path = parent.path ? `${parent.path}/${name}` : name;
    if (at < 0) linkPaths[i] = path;
    else files[i] = { type: "file", name, path, absolute: `${job.root}/${path}`, parent };
  }
  return { files, linkPaths };
}

/**
 * Read the leaves of chunk `chunk` into its slot, publishing each one as it
 * is read. Stops when the calling thread has taken the rest of the chunk,
 * before a file too large for what is left of the slot, or at a failed read;
 * returns false after a failed read: the lane then stops for good, since its
 * cursor may hold a directory that failed its check.
 */
function fill(job: LaneJob, leaves: { files: FileEntry[]; linkPaths: string[] }, chunk: number, data: Buffer, meta: Int32Array, base: number, cursor: DirectoryCursor): boolean {
  const { files, linkPaths } = leaves;
  const from = chunk * CHUNK;
  const to = Math.min(files.length, from + CHUNK);
  const records = job.records;
  let used = 0;
  let ok = true;
  let index = from;
  for (; index < to; index++) {
    const file = files[index];
    const word = base + SIZES + LEAF_WORDS * (index - from);
    if (file !== undefined) {
      const pathLength = records ? Buffer.byteLength(file.path) : 0;
      const head = records ? execHeadLength(pathLength) : 0;
      if (used + head > SLOT_BYTES) break;
      let before;
      try {
        before = readSmallFile(file, cursor.pathOf(file), data, used + head, SLOT_BYTES - used - head);
      } catch {
        ok = false;
        break;
      }
      // Too large for what is left of the slot, or for the slot.
      if (before === null) break;
      if (records) writeExecHead(data, used, file.path, pathLength, before.mode, before.size);
      meta[word] = before.size;
      meta[word + 1] = before.mode;
      used += head + before.size;
    } else if (records) {
      const path = linkPaths[index]!;
      const target = job.leafTargets![index]!;
      const pathLength = Buffer.byteLength(path);
      const targetLength = Buffer.byteLength(target);
      if (used + execSymlinkLength(pathLength, targetLength) > SLOT_BYTES) break;
      used = writeExecSymlink(data, used, path, pathLength, target, targetLength);
    }
    meta[word + 2] = used;
    // Published: the calling thread may hash it from now on. Failing, the rest is the calling thread's.
    if (Atomics.compareExchange(meta, base + PROGRESS, index - from, index - from + 1) !== index - from) return ok;
  }
  Atomics.compareExchange(meta, base + PROGRESS, index - from, DONE | (index - from));
  return ok;
}

function run(job: LaneJob): number {
  const control = new Int32Array(job.control);
  const meta = new Int32Array(job.meta);
  const leaves = rebuild(job);
  const total = leaves.files.length;
  const chunks = Math.ceil(total / CHUNK);
  const cursor = new DirectoryCursor();
  let claimed = 0;
  // The cold-cache watch of file-reader.ts, here rather than on the calling thread, which has the hashing to do.
  // getrusage() is slow while the calling thread is busy (up to hundreds of microseconds here): it is asked only after a
  // chunk that took longer than a warm one does, and only the block reads decide.
  let blockReads = job.watchCold ? process.resourceUsage().fsRead : -1;
  try {
    let chunk = 0;
    while (Atomics.load(control, STOP) === 0) {
      const at = Atomics.load(control, AT);
      if (chunk <= at) chunk = at + 1;
      if (chunk >= chunks) break;
      const base = (chunk % SLOTS) * META_WORDS;
      if (Atomics.load(meta, base + STATE) !== FREE) {
        // The calling thread has not hashed what this slot holds yet.
        Atomics.wait(meta, base + STATE, BUSY, 20);
        continue;
      }
      // Set before the claim, which publishes them: the calling thread never looks at the slot of a chunk it claimed itself.
      meta[base + HOLDS] = chunk;
      Atomics.store(meta, base + PROGRESS, 0);
      Atomics.store(meta, base + STATE, BUSY);
      if (Atomics.compareExchange(control, CLAIMS + chunk, UNCLAIMED, BY_WORKER) !== UNCLAIMED) {
        Atomics.store(meta, base + STATE, FREE);
        chunk += 1;
        continue;
      }
      claimed += 1;
      const slot = Buffer.from(job.data, (chunk % SLOTS) * SLOT_BYTES, SLOT_BYTES);
      const started = performance.now();
      if (!fill(job, leaves, chunk, slot, meta, base, cursor)) break;
      if (blockReads >= 0 && performance.now() - started > SLOW_CHUNK_MS) {
        const now = process.resourceUsage().fsRead;
        if (now - blockReads >= COLD_BLOCK_READS) {
          Atomics.store(control, COLD, chunk + 1);
          blockReads = -1;
        } else blockReads = now;
      }
      chunk += 1;
    }
  } finally {
    cursor.close();
  }
  return claimed;
}

parentPort!.on("message", (job: LaneJob) => {
  let done = 0;
  const hook = job.testHook;
  setReadHook(hook ? (path) => path === hook.appendAfterRead && appendFileSync(`${job.root}/${path}`, "+") : null);
  try {
    done = run(job);
  } finally {
    parentPort!.postMessage({ done });
  }
});

// Loaded: prepareLanes() may resolve.
parentPort!.postMessage({ ready: true });
