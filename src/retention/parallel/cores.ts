import { availableParallelism } from "node:os";

/**
 * How many cores the digest may use, and how many of them pool workers hold
 * right now. Its own module so that the digest's lanes (digest/lanes.ts) can
 * ask without loading the pool, which loads the digest.
 */

let parallelismOverride: number | null = null;
let held = 0;

/** Lanes a pool may use: os.availableParallelism(), unless set (tests, the benchmark's one-by-one baseline). */
export function parallelism(): number {
  return parallelismOverride ?? availableParallelism();
}

/** Set the number of lanes (null: os.availableParallelism() again). Not part of the public API. */
export function setParallelism(lanes: number | null): void {
  parallelismOverride = lanes === null ? null : Math.max(1, Math.floor(lanes));
}

/** Pool workers some caller holds: while any is held, its trees are read on the other cores already. */
export function workersHeld(): number {
  return held;
}

export function countHeld(delta: 1 | -1): void {
  held = Math.max(0, held + delta);
}
