import { OatsError } from "../core/index.js";
import type { Level } from "../captures/index.js";
import { resolveScope } from "../retention/index.js";
import { outboxWritable } from "./outbox.js";
import {
  evidencePosture,
  type EvidencePostureResult,
  type FarSide,
  resolveQueuedCapture,
  type DispatchOptions,
  type DispatchPlan,
} from "../captures/index.js";
import { resolveTransport } from "./push.js";
import type { EvidenceTransport } from "./transport.js";

/**
 * The posture check at dispatch (the shell around posture.ts): call it
 * after classification and before the child starts. Where the far side is
 * configured, first match wins:
 *
 *   1. `options.to` (the CLI's `dispatch --evidence-to <dest>`),
 *   2. `OATS_EVIDENCE_TO` in `options.env` (default: process.env),
 *   3. none.
 *
 * A malformed destination is refused (`usage` / `invalid-input`) before the
 * far side is probed. A refused posture throws: `audit-unavailable`
 * (reason outbox-unwritable) for every tier when the outbox cannot be
 * written, `classification-refused` (reason evidence-far-side-unreachable)
 * for confidential work when a configured far side cannot be reached.
 */

export interface EvidencePostureOptions {
  readonly to?: string | EvidenceTransport | null;
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly allowSameFilesystem?: boolean;
}

/**
 * Where evidence goes, first match wins: `options.to`, then `OATS_EVIDENCE_TO` in `options.env` (default: this
 * process's environment), else null (no far side). Nothing is parsed or probed here.
 */
export function evidenceDestination(options: EvidencePostureOptions = {}): string | EvidenceTransport | null {
  if (options.to !== undefined && options.to !== null) return options.to;
  const env = options.env ?? process.env;
  const configured = Object.hasOwn(env, "OATS_EVIDENCE_TO") ? env["OATS_EVIDENCE_TO"] : undefined;
  return typeof configured === "string" && configured !== "" ? configured : null;
}

/**
 * The posture check at dispatch (src/evidence/posture-check.ts): probe the configured far side, check that the outbox
 * can be written, and decide. Refuses a malformed destination (`usage`, `invalid-input`), an unwritable outbox
 * (`audit-unavailable`, reason `outbox-unwritable`) and, for confidential work, an unreachable far side
 * (`classification-refused`, reason `evidence-far-side-unreachable`).
 * @param level the run's effective classification level
 */
export async function checkEvidencePosture(
  scope: string,
  level: Level,
  options: EvidencePostureOptions = {},
): Promise<EvidencePostureResult> {
  const realScope = resolveScope(scope);
  const destination = evidenceDestination(options);
  const transport =
    destination === null ? null : resolveTransport(realScope, destination, options.allowSameFilesystem === true);
  const probe = transport === null ? null : await transport.probe();
  const farSide: FarSide = probe === null ? "none" : probe.state;
  const writable = outboxWritable(realScope);
  const decided = evidencePosture({ level, farSide, outboxWritable: writable.writable });
  const to = transport?.describe() ?? null;
  if (!decided.proceed) {
    if (!writable.writable) {
      const error = writable.error;
      error.details["evidence"] = { level, to, farSide };
      throw error;
    }
    throw new OatsError(
      "classification-refused",
      `confidential work needs its evidence far side, and ${to} cannot be ` +
        `reached (${probe?.reason ?? "unknown"}); nothing was started`,
      {
        reason: "evidence-far-side-unreachable",
        level,
        to,
        probe: probe?.reason ?? null,
      },
    );
  }
  const receipt =
    decided.posture === "delivered-later"
      ? `evidence: queued for ${to} (reachable); \`oats push --to ${to}\` delivers it`
      : decided.posture === "buffered"
        ? `evidence: buffered locally, ${to} cannot be reached ` +
          `(${probe?.reason ?? "unknown"}); \`oats push --to ${to}\` delivers it later`
        : "evidence: queued locally (no far side configured: OATS_EVIDENCE_TO or --evidence-to)";
  return { posture: decided.posture, buffered: decided.buffered, to, farSide, probe: probe?.reason ?? null, receipt };
}

export type { EvidencePostureResult } from "../captures/index.js";

/**
 * The plan of a dispatch that will run (`dispatch --exec`): resolveQueuedCapture
 * with this layer's posture check at its step 5b, so the outbox and the far
 * side are checked, and the result recorded, before anything runs.
 */
export function planQueuedRun(
  scope: string,
  jobId: string,
  options: Omit<DispatchOptions, "exec" | "postureCheck"> = {},
): Promise<DispatchPlan> {
  return resolveQueuedCapture(scope, jobId, { ...options, exec: true, postureCheck: checkEvidencePosture });
}
