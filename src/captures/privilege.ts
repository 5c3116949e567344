import { OatsError } from "../core/index.js";

/**
 * The privileged-account gate (the conformance property `privileged-account`): a capture runs as root
 * only if its approved composition says so (`privileged: true`, set in the
 * capture spec and therefore seen and approved with the composition).
 *
 * The child inherits the dispatcher's effective uid, so the dispatcher's
 * euid is what is checked, before anything starts. The euid is injectable
 * (DispatchOptions.euid) so a test can show both sides on one host; the
 * default is the process's real effective uid. A platform without euids
 * (Windows) has no root to refuse.
 */

export const ROOT_UID = 0;

export function currentEuid(): number | null {
  return typeof process.geteuid === "function" ? process.geteuid() : null;
}

export function privilegeGate(input: {
  readonly capture: string;
  readonly privileged: boolean;
  readonly euid: number | null;
}): void {
  if (input.euid !== ROOT_UID || input.privileged) return;
  throw new OatsError(
    "classification-refused",
    `capture ${input.capture} would run as root (euid 0), but its approved ` +
      `composition is not privileged; run the dispatcher as an ordinary user, ` +
      `or prepare the capture with privileged: true and approve that composition`,
    { reason: "privileged-account", capture: input.capture, euid: input.euid, privileged: false },
  );
}
