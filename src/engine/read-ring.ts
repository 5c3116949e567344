import type { FileConsumer } from "./file-reader.js";
import { nativeError, nativeReads, type NativeAddon, type NativeRing } from "./native-reads.js";
import { finishSync, type OpenedFile } from "./opened-file.js";
import { changed, changedOrUnreadable } from "./refusals.js";

/**
 * The rest of a large file copied out of the page cache by a second core
 * (native/read-ring.c) while this thread hashes the piece before: only for
 * a pure hash with a core to spare and a warm cache (ReadOptions.inline
 * `"warm"`), where this thread would otherwise make the copy itself between
 * its hashes (docs/design/performance.md, "The read ring").
 *
 * Why small pieces in a small ring: the copy helps only while the pieces
 * are still in a cache the hashing core reaches fast. In C, over 8 x 128
 * MiB, a ring of about 512 KiB let the hash run at 620-660 ms against
 * 745-840 ms inline; 1 MiB pieces double buffered (what the thread pool
 * read did) lost, at 880-900 ms.
 *
 * Every byte is still read from the file's own descriptor, in order, into a
 * slot this thread then hashes, and the file is fstat'd again after its
 * last piece: the checks are those of the inline read.
 */

export const RING_SLOTS = 8;
export const RING_SLOT_SIZE = 64 << 10;
/** A thread's start costs some tens of microseconds: under this much left to read it saves less. */
export const RING_MIN_REST = 2 << 20;
/** Pieces hashed between yields to the event loop (1 MiB, as the inline read). */
const YIELD_EVERY_PIECES = 16;

interface Ring {
  readonly handle: NativeRing;
  readonly memory: Buffer;
}

/** This thread's ring, made on first use; null once the addon is missing or a stop did not end its thread. */
let threadRing: Ring | null | undefined;
let readByRing = 0;

/** Large files whose rest a ring's thread read so far, in this thread (tests: which way the policy chose). */
export function largeFilesReadByRing(): number {
  return readByRing;
}

function takeRing(native: NativeAddon): Ring | null {
  if (threadRing === undefined) {
    const handle = native.createRing(RING_SLOTS, RING_SLOT_SIZE);
    threadRing = { handle, memory: native.ringMemory(handle) };
  }
  return threadRing;
}

/**
 * Reads and consumes the rest of `file` (from its head to `size`) through
 * the ring, then finishes it (fstat, close, compare). False, with nothing
 * read, when no ring thread could start: the caller reads inline instead.
 */
export async function consumeRestByRing(file: OpenedFile, size: number, consumer: FileConsumer): Promise<boolean> {
  const native = nativeReads();
  const ring = native === null ? null : takeRing(native);
  if (native === null || ring === null) return false;
  let position = file.head.length;
  // False also while another pass on this thread (awaiting between two pieces) holds the ring: this one reads inline.
  if (!native.ringRead(ring.handle, file.fd, position, size - position)) return false;
  readByRing += 1;
  try {
    for (let piece = 0; position < size; piece++) {
      const wanted = Math.min(RING_SLOT_SIZE, size - position);
      const got = native.ringNext(ring.handle);
      if (got < 0) throw changedOrUnreadable(nativeError(-got, STEP_READ), file.entry.path);
      if (got !== wanted) throw changed(file.entry.path, "short read");
      const offset = (piece % RING_SLOTS) * RING_SLOT_SIZE;
      position += got;
      const pending = consumer.chunk(ring.memory.subarray(offset, offset + got));
      if (pending) await pending;
      if ((piece + 1) % YIELD_EVERY_PIECES === 0) await new Promise((resolve) => setImmediate(resolve));
    }
  } finally {
    // A thread still in its pread after the wait keeps the ring: this thread makes no other.
    if (!native.ringStop(ring.handle)) threadRing = null;
  }
  finishSync(file);
  return true;
}

const STEP_READ = 3;
