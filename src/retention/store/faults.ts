/**
 * Fault injection for the publication steps. Production code calls
 * `faultPoint(step)` at each step whose failure cannot be produced on demand
 * (a full disk during copy, a failed move of an adopted tree, an fsync
 * error, a failed rename, a hard link the filesystem refuses (EXDEV), a
 * run's record that cannot be written after its footer was); tests install
 * a hook that throws there. With
 * no hook installed this is a no-op.
 */
export type PublishStep = "copy" | "adopt" | "fsync" | "verify-staged" | "link" | "rename" | "cleanup" | "record";

type FaultHook = (step: PublishStep, detail: string) => void;

let hook: FaultHook | null = null;

export function setFaultHook(next: FaultHook | null): void {
  hook = next;
}

export function faultPoint(step: PublishStep, detail = ""): void {
  hook?.(step, detail);
}
