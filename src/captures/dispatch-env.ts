import { OatsError } from "../core/index.js";
import { MIN_CREDENTIAL_LENGTH, credentialValueProblem } from "./redact.js";
import type { ResolutionRecord } from "../resolution/index.js";
import { placeLoaderEnvironment } from "./loader-paths.js";
import { nodeOptionsWithGuard } from "./node-guard.js";

/**
 * The environment a dispatched capture runs with: the record's pinned
 * non-secret values, every file a loader variable names checked inside the
 * run copy at `root` and rewritten to its place there (loader-paths.ts;
 * refused, `invalid-input`, when it lies outside), the credential variables
 * the record names (and only those) taken from `source`, and the Node guard
 * appended to NODE_OPTIONS after the pinned options were placed.
 * Nothing else of the caller's environment leaks in. A credential whose
 * value a run log could not mask (redact.ts) is refused, naming the
 * variable, never the value. Every name is an own key, `__proto__` included:
 * the environment is built without a prototype, where assigning that name
 * is not a prototype change that silently drops it, and spread into a plain
 * object, which defines it as an ordinary key (stored records refuse the key
 * before they get here; a caller building a capture in memory may not).
 */
export function dispatchEnvironment(
  capture: Pick<NonNullable<ResolutionRecord["capture"]>, "env" | "credentials">,
  source: Readonly<Record<string, string | undefined>>,
  guard: string,
  root: string,
): { env: Record<string, string>; provided: string[]; missing: string[] } {
  const env = Object.create(null) as Record<string, string>;
  const placed = placeLoaderEnvironment(capture.env, root);
  for (const [name, value] of Object.entries(capture.env)) env[name] = placed.get(name) ?? value;
  const provided: string[] = [];
  const missing: string[] = [];
  for (const ref of capture.credentials) {
    if (ref.kind !== "env") continue;
    const value = Object.hasOwn(source, ref.name) ? source[ref.name] : undefined;
    if (typeof value === "string") {
      const problem = credentialValueProblem(value);
      if (problem !== null) {
        throw new OatsError(
          "invalid-input",
          `credential ${ref.name} cannot be masked in the run log: its value is ${problem}`,
          { credential: ref.name, reason: "credential-unmaskable", minLength: MIN_CREDENTIAL_LENGTH },
        );
      }
      env[ref.name] = value;
      provided.push(ref.name);
    } else {
      missing.push(ref.name);
    }
  }
  env["NODE_OPTIONS"] = nodeOptionsWithGuard(env["NODE_OPTIONS"], guard);
  return { env: { ...env }, provided, missing };
}
