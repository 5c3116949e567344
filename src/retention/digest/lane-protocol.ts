/**
 * The shared memory between the calling thread and the lane worker of a
 * small-file digest (lanes.ts, lane-worker.ts). Leaves are taken in chunks of
 * CHUNK consecutive leaves; each chunk is claimed by exactly one side with a
 * compare-and-swap on its claim word. A chunk the worker claims is read into
 * slot chunk % SLOTS; the calling thread hashes it from there, in order, and
 * frees the slot.
 */

/** Leaves per chunk: about half a millisecond of reads; small enough for the two sides to balance. */
export const CHUNK = 64;
/** Slots of the ring: how many chunks the worker may hold read and not yet hashed. */
export const SLOTS = 8;
/** Bytes of one slot: a chunk's files, packed; a file that does not fit is left to the calling thread. */
export const SLOT_BYTES = 512 << 10;

// Control words (Int32Array over `control`).
/** The chunk the calling thread is at. */
export const AT = 0;
/** Non-zero: the worker stops (the pass ended or failed). */
export const STOP = 1;
/** Set by the worker (to the chunk it was at, plus one) when the process's block reads show a cold page cache: the calling thread then starts the read-ahead (prefetch.ts). */
export const COLD = 2;
/** Then one claim word per chunk. */
export const CLAIMS = 3;
export const UNCLAIMED = 0;
export const BY_CALLER = 1;
export const BY_WORKER = 2;

// Slot words (Int32Array over `meta`, META_WORDS per slot).
/** FREE, or BUSY from the worker's claim of a chunk into it until the calling thread has hashed it. */
export const STATE = 0;
export const FREE = 0;
export const BUSY = 1;
/** The chunk the slot holds (written before the claim). */
export const HOLDS = 1;
/**
 * How many leaves of the chunk, from its first, the worker has read (symlinks
 * count), with DONE once it has stopped (the count is then final) or TAKEN
 * once the calling thread took the rest. Both sides move it by
 * compare-and-swap only: the worker publishes each leaf, the calling thread
 * takes what is published and reads the rest itself, so it never waits for
 * the worker.
 */
export const PROGRESS = 2;
export const DONE = 1 << 16;
export const TAKEN = 1 << 17;
export const COUNT_MASK = DONE - 1;
/** Then per leaf, LEAF_WORDS words: its size and its mode (the first fstat's; a symlink's are unused), and where its bytes end in the slot. */
export const SIZES = 3;
export const LEAF_WORDS = 3;
export const META_WORDS = SIZES + LEAF_WORDS * CHUNK;

/** What the worker is sent to read: the leaves as flat arrays (a structured clone of 20,000 objects would cost more). */
export interface LaneJob {
  readonly control: SharedArrayBuffer;
  readonly meta: SharedArrayBuffer;
  readonly data: SharedArrayBuffer;
  /** The root's absolute path; directory 0 is the root. */
  readonly root: string;
  /** Per directory after the root: its parent's index, its name, its dev and ino as the walk saw them. */
  readonly dirParents: Int32Array;
  readonly dirNames: string[];
  readonly dirDevs: Float64Array;
  readonly dirInos: Float64Array;
  readonly rootDev: number;
  readonly rootIno: number;
  /** Per leaf: its directory's index (a symlink's as -index - 1); its name. */
  readonly leafDirs: Int32Array;
  readonly leafNames: string[];
  /**
   * Whether the slot holds each leaf's oats.tree-exec.v1 record (the pass
   * hashes that one framing alone: the calling thread then hashes a chunk's
   * records in one call), or only the files' contents.
   */
  readonly records: boolean;
  /** With records: per leaf, a symlink's target ("" for a file). */
  readonly leafTargets: string[] | null;
  /** Whether to watch for a cold page cache (prefetchMode() "auto" and enough files). */
  readonly watchCold: boolean;
  /** Tests only (setLaneTestHook): append a byte to the file at this path right after the worker read it. */
  readonly testHook: { readonly appendAfterRead: string } | null;
}

export type LaneMessage = { readonly done: number };
