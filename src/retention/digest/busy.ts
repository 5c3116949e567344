/**
 * Whether every core may already have a tree to hash: this thread is a
 * worker lane of the pool (pool.ts), or a caller holds a worker lane that
 * runs beside this thread. The large-file reader then reads inline rather
 * than on the thread pool (engine/file-reader.ts, ReadOptions.inline). Kept below
 * pool.ts, which loads the digest modules that ask.
 */

let held = 0;
let laneWorker = false;

/** Workers acquired and not yet released (pool.ts counts them; tests: a refusal must hand back every worker it took).
 * */
export function workersHeld(): number {
  return held;
}

export function countHeld(delta: 1 | -1): void {
  held += delta;
}

/** Called once by the pool's worker script. */
export function markLaneWorker(): void {
  laneWorker = true;
}

export function coresBusy(): boolean {
  return laneWorker || held > 0;
}
