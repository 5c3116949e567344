/** Every property of the suite, in the order of their numbers, then the run-time trust chain. */
import { cancelTakesTree } from "./cancel.js";
import { farSideDelivery } from "./delivery.js";
import { exitStatus, failedRunComplete } from "./exit.js";
import { privilegedAccount } from "./privileged.js";
import { redaction } from "./redaction.js";
import { refusedDispatchNoRun, trustTampered, trustUnapproved } from "./refusal.js";
import { gapPreserved, stampPerLine } from "./stamps.js";
import type { Property } from "./support.js";
import { textNotTerminal } from "./text.js";

export const PROPERTIES: readonly Property[] = [
  stampPerLine,
  gapPreserved,
  exitStatus,
  failedRunComplete,
  refusedDispatchNoRun,
  privilegedAccount,
  redaction,
  cancelTakesTree,
  farSideDelivery,
  textNotTerminal,
  trustUnapproved,
  trustTampered,
];

export type { Property, PropertyContext } from "./support.js";
