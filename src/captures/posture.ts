import type { Level } from "./classification.js";

/**
 * The evidence posture of a dispatch (pure): may the run start, given its
 * effective classification, whether the far side can be reached now and
 * whether the local outbox can be written?
 *
 * | outbox   | far side    | public / internal            | confidential                     |
 * |----------|-------------|------------------------------|----------------------------------|
 * | unwritable | any       | refused (outbox-unwritable)  | refused (outbox-unwritable)      |
 * | writable | reachable   | runs, delivered-later        | runs, delivered-later            |
 * | writable | unreachable | runs, buffered (receipt says)| refused (far-side-unreachable)   |
 * | writable | none        | runs, none (queued locally)  | runs, none (queued locally)      |
 *
 * "none" is a deployment without a far side configured: the run is still
 * queued in the outbox (a later `oats push --to` delivers it), but no
 * delivery was promised. A deployment that must never keep confidential
 * evidence only locally configures a far side; from then on an unreachable
 * far side refuses confidential work before anything runs.
 */

export type FarSide = "reachable" | "unreachable" | "none";
export type DeliveryPosture = "delivered-later" | "buffered" | "none";

export interface PostureInput {
  readonly level: Level;
  readonly farSide: FarSide;
  readonly outboxWritable: boolean;
}

export type Posture =
  | { readonly proceed: true; readonly buffered: boolean; readonly posture: DeliveryPosture; readonly reason: string }
  | {
      readonly proceed: false;
      readonly buffered: false;
      readonly posture: null;
      readonly reason: "outbox-unwritable" | "far-side-unreachable";
    };

/**
 * Decide whether a run may start, and how its evidence travels, from the classification level, the far side's
 * state and whether the outbox can be written (pure). An unwritable outbox stops every tier; an unreachable far
 * side stops confidential work and buffers the rest.
 */
export function evidencePosture(input: PostureInput): Posture {
  if (!input.outboxWritable) return { proceed: false, buffered: false, posture: null, reason: "outbox-unwritable" };
  switch (input.farSide) {
    case "reachable":
      return { proceed: true, buffered: false, posture: "delivered-later", reason: "far-side-reachable" };
    case "unreachable":
      if (input.level === "confidential")
        return { proceed: false, buffered: false, posture: null, reason: "far-side-unreachable" };
      return { proceed: true, buffered: true, posture: "buffered", reason: "far-side-unreachable" };
    case "none":
      return { proceed: true, buffered: true, posture: "none", reason: "no-far-side" };
  }
}

/** What the evidence layer's posture check answers at dispatch (src/evidence/posture-check.ts). */
export interface EvidencePostureResult {
  readonly posture: DeliveryPosture;
  readonly buffered: boolean;
  readonly to: string | null;
  readonly farSide: FarSide;
  /** Why the far side is unreachable (the transport's probe), or null. */
  readonly probe: string | null;
  /** One line for the receipt. */
  readonly receipt: string;
}

/** Where run evidence goes, as a dispatch names it: `to` (else OATS_EVIDENCE_TO in `env`, else none). */
export interface DispatchDelivery {
  readonly to?: string | null;
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly allowSameFilesystem?: boolean;
}

/** The port through which an exec'd dispatch asks the evidence layer for its posture; a refusal throws. */
export type EvidencePostureCheck = (
  scope: string,
  level: Level,
  options: DispatchDelivery,
) => Promise<EvidencePostureResult>;
