import { approvals } from "./commands/approvals.js";
import { approve, revoke } from "./commands/approve.js";
import { attestationLs, attestationVerify } from "./commands/attestation.js";
import { keyGenerate, keyShow } from "./commands/key.js";
import { trustAdd, trustLs, trustRm } from "./commands/trust.js";
import { auditHead, auditShow, auditVerify } from "./commands/audit.js";
import { capturePrepare } from "./commands/capture-prepare.js";
import { cleanup } from "./commands/cleanup.js";
import { dedupe } from "./commands/dedupe.js";
import { completion } from "./commands/completion.js";
import { digest } from "./commands/digest.js";
import { doctor } from "./doctor.js";
import { dispatch } from "./commands/dispatch.js";
import { exportCommand } from "./commands/export.js";
import { fsck } from "./commands/fsck.js";
import { gcCommand } from "./commands/gc.js";
import { pinCommand, pinsCommand, unpinCommand } from "./commands/pin.js";
import { repairCommand } from "./commands/repair.js";
import { importCommand } from "./commands/import.js";
import { pullCommand } from "./commands/pull.js";
import { outboxLs, pushCommand } from "./commands/push.js";
import { instanceShow } from "./commands/instance-show.js";
import { ls } from "./commands/ls.js";
import { path } from "./commands/path.js";
import { prepare } from "./commands/prepare.js";
import { queueAdd, queueLs } from "./commands/queue.js";
import { reconstruct } from "./commands/reconstruct.js";
import { resolutionLs } from "./commands/resolution-ls.js";
import { resolutionShow } from "./commands/resolution-show.js";
import { resolutionVerify } from "./commands/resolution-verify.js";
import { retain } from "./commands/retain.js";
import { runCancel } from "./commands/run-cancel.js";
import { runLs } from "./commands/run-ls.js";
import { runSeal } from "./commands/run-seal.js";
import { runShow } from "./commands/run-show.js";
import { runVerify } from "./commands/run-verify.js";
import { schema } from "./commands/schema.js";
import { sourceRetain } from "./commands/source-retain.js";
import { verify } from "./commands/verify.js";
import type { CommandSpec } from "./support/context.js";
import { commandNamed as commandNamedIn, createMain } from "./program.js";

export { GROUPS, VIRTUAL_COMMANDS, type Main, type MainIo } from "./program.js";

/**
 * A spec named "group sub" (e.g. "resolution verify") is the subcommand `sub`
 * of the command group `group`; the envelope's `command` is the whole name.
 */
export const COMMANDS: readonly CommandSpec[] = [
  retain,
  verify,
  path,
  digest,
  ls,
  fsck,
  cleanup,
  dedupe,
  prepare,
  resolutionShow,
  resolutionVerify,
  resolutionLs,
  instanceShow,
  reconstruct,
  capturePrepare,
  approve,
  revoke,
  approvals,
  queueAdd,
  queueLs,
  dispatch,
  runLs,
  runShow,
  runVerify,
  runCancel,
  runSeal,
  auditShow,
  auditVerify,
  auditHead,
  exportCommand,
  importCommand,
  pushCommand,
  pullCommand,
  sourceRetain,
  schema,
  completion,
  gcCommand,
  pinCommand,
  unpinCommand,
  pinsCommand,
  repairCommand,
  outboxLs,
  keyGenerate,
  keyShow,
  trustAdd,
  trustLs,
  trustRm,
  attestationLs,
  attestationVerify,
  doctor,
];

/** The command the arguments name, if any, among all commands (program.ts). */
export const commandNamed = (argv: readonly string[]): string | null => commandNamedIn(argv, COMMANDS);

/** The whole program: every command, help and version. */
export const main = createMain(COMMANDS);
