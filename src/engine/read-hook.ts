/**
 * A test seam between reading a file and checking that it did not change.
 * A writer that lands exactly in that window cannot be produced on demand
 * by a real race for a file read in microseconds, so tests install a hook
 * here that changes the file for real; the reader must then refuse it. With
 * no hook installed this is one null check per file.
 */
type ReadHook = (path: string) => void;

let hook: ReadHook | null = null;

export function setReadHook(next: ReadHook | null): void {
  hook = next;
}

export function afterRead(path: string): void {
  hook?.(path);
}

/** Whether a hook is installed (the native reads then call back into it between read and fstat). */
export function hasReadHook(): boolean {
  return hook !== null;
}
