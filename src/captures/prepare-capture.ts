import { statSync } from "node:fs";
import { join, resolve } from "node:path";
import { type JsonObject, OatsError, errnoCode, canonicalJsonBytes } from "../core/index.js";
import {
  capabilityRows,
  readLockFile,
  TREE_EXEC,
  integrityText,
  retainCapabilityArtifact,
  retainTree,
  type RetainOptions,
  inspectStoreAt,
  resolveScope,
  withPublishLease,
  BLOBS_DIR,
  putBlob,
} from "../retention/index.js";
import type { ArtifactReceipt } from "../retention/index.js";
import {
  capabilityArtifactEntry,
  resolveEntrypoint,
  findArgSecrets,
  findSecrets,
  secretRefusal,
  INSTALLED_DIR,
  LOCK_FILE,
  RESOLUTIONS_DIR,
  writeResolution,
} from "../resolution/index.js";
import type { ArtifactRefRecord, ResolutionRecord } from "../resolution/index.js";
import type { ApprovalSubject } from "./approvals.js";
import { audit, audited, type AuditSubject } from "../ledger/index.js";
import {
  deriveLevel,
  readClassificationConfigFile,
  stricter,
  type DerivedLevel,
  type Level,
} from "./classification.js";
import { readCaptureProfileFile, readCaptureSpecFile, type LoadedCaptureSpec } from "./spec.js";
import { compositionOf, compositionSubject, type CaptureComposition, type CompositionSubject } from "./composition.js";
import { checkLoaderEnvironment } from "./loader-paths.js";

/**
 * prepareCapture(scope, spec): pin everything a queued capture will run with,
 * in this order:
 *
 * 1. validate without side effects: the spec, the classification config
 *    (`invalid-input`, nothing pinned), the profile, secrets in the pinned env
 *    (`secret-in-record`), the executable's directory (and, for a capability,
 *    its lock rows), every file a loader variable names (inside that
 *    directory: loader-paths.ts, `invalid-input`), and the store components;
 * 2. retain the executable tree under its oats.tree-exec.v1 identity (a
 *    capability is first checked against its lock row and provenance);
 * 3. pin the exact bytes of the classification config, the profile and the
 *    spec as blobs;
 * 4. derive the target's level from the config; a declared level that differs
 *    is audited as a security event;
 * 5. build the capture record, check its entry point inside the retained
 *    tree, and commit it (content addressed: never replaces);
 * 6. audit the prepare. If the audit log cannot be written the prepare is
 *    refused (`audit-unavailable`); the record, unreferenced, stays harmless.
 *
 * The record's composition (composition.ts: everything that decides what
 * runs and under which gate) is pinned as a blob too, so that `approve` can
 * show and record exactly what it approves. Approval is a separate, explicit
 * act on the composition's digest: preparing never approves anything.
 */

export interface PrepareCaptureOptions extends RetainOptions {
  /** Recorded in the audit entry, e.g. `{tick: job}` when a prepare-on-tick job re-prepares. */
  readonly auditDetails?: JsonObject;
}

export interface PrepareCaptureResult {
  readonly id: string;
  readonly status: "written" | "kept";
  readonly record: ResolutionRecord;
  /** The exact executable revision the capture runs. */
  readonly subject: ApprovalSubject;
  /** What an operator approves for this capture to dispatch: its whole composition. */
  readonly composition: { readonly subject: CompositionSubject; readonly value: CaptureComposition };
  readonly retained: ArtifactReceipt;
  readonly classification: {
    readonly declared: Level;
    readonly derived: DerivedLevel;
    readonly effective: Level;
    readonly mismatch: boolean;
  };
  readonly blobs: {
    readonly config: string;
    readonly profile: string | null;
    readonly spec: string;
    readonly composition: string;
  };
}

/** The artifact a capture record runs, as an approval subject. */
export function captureSubject(record: ResolutionRecord): ApprovalSubject {
  const capture = record.capture;
  const entrypoint = capture ? record.entrypoints[capture.entrypoint] : undefined;
  if (!capture || !entrypoint)
    throw new OatsError("invalid-resolution", "not a capture record: it has no capture entry point", {
      kind: record.kind,
    });
  return {
    kind: entrypoint.artifact.kind,
    key: entrypoint.artifact.key,
    integrity: integrityText(entrypoint.artifact.integrity),
  };
}

function isDirectory(path: string, what: string): void {
  let directory: boolean;
  try {
    directory = statSync(path).isDirectory();
  } catch (error) {
    throw new OatsError("invalid-input", `${what}: ${path} does not exist`, { dir: path, errno: errnoCode(error) });
  }
  if (!directory) throw new OatsError("invalid-input", `${what}: ${path} is not a directory`, { dir: path });
}

/** Step 1: everything that can be refused before the store is touched. */
function validate(realScope: string, loaded: LoadedCaptureSpec) {
  const { spec } = loaded;
  const config = readClassificationConfigFile(spec.classificationConfig);
  const profile = spec.profile === undefined ? null : readCaptureProfileFile(spec.profile);
  // Walking the env object judges each value under its own name (API_KEY: <literal> is a secret).
  const findings = findSecrets({ ...spec.env }, "/capture/env");
  findings.push(...findArgSecrets(spec.executable.args, `/entrypoints/${spec.name}/args`));
  if (findings.length > 0) throw secretRefusal(findings);
  inspectStoreAt(realScope, RESOLUTIONS_DIR);
  inspectStoreAt(realScope, BLOBS_DIR);
  let capability: {
    id: string;
    dir: string;
    lock: ReturnType<typeof readLockFile>;
    rows: ReturnType<typeof capabilityRows>;
  } | null = null;
  if (spec.executable.capability !== undefined) {
    const id = spec.executable.capability;
    const dir = spec.executable.dir ?? join(realScope, ...INSTALLED_DIR, id);
    const lock = readLockFile(spec.executable.lock ?? join(realScope, LOCK_FILE));
    const rows = capabilityRows(lock, id);
    isDirectory(dir, `capability ${id}`);
    capability = { id, dir, lock, rows };
  } else {
    isDirectory(spec.executable.tree!, `capture ${spec.name} executable tree`);
  }
  // Every file a loader variable makes a runtime read lies inside the tree the approval pins. A source changed
  // after this check cannot slip a link out past it: retaining refuses any symlink that leads out of the tree
  // (retention.md), and dispatch checks the run copy again.
  checkLoaderEnvironment(spec.env, capability?.dir ?? spec.executable.tree!);
  return { config, profile, capability };
}

/** Under a publish lease (retention/store/lease.ts) until the record is committed: gc never takes what it retained or
 * pinned. */
export function prepareCapture(
  scope: string,
  specInput: LoadedCaptureSpec | string,
  options: PrepareCaptureOptions = {},
): Promise<PrepareCaptureResult> {
  return withPublishLease(resolveScope(scope), () => prepareCaptureLeased(scope, specInput, options));
}

async function prepareCaptureLeased(
  scope: string,
  specInput: LoadedCaptureSpec | string,
  options: PrepareCaptureOptions,
): Promise<PrepareCaptureResult> {
  const realScope = resolveScope(scope);
  const loaded =
    typeof specInput === "string"
      ? await audited(realScope, "prepare", { spec: resolve(specInput) }, async () => readCaptureSpecFile(specInput))
      : specInput;
  const { spec } = loaded;
  const subjectOfSpec: AuditSubject = { capture: spec.name, spec: loaded.path };
  return audited(realScope, "prepare", subjectOfSpec, async () => {
    const { config, profile, capability } = validate(realScope, loaded);
    const retainOptions: RetainOptions = {
      ...(options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs }),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    };

    // Step 2: retain the executable tree.
    const artifacts: ResolutionRecord["artifacts"] = {};
    let retained: ArtifactReceipt;
    if (capability) {
      const legacy = await retainCapabilityArtifact(
        realScope,
        capability.dir,
        capability.id,
        capability.lock,
        retainOptions,
      );
      retained = await retainTree(
        realScope,
        { kind: "capability", key: capability.id, source: capability.dir, expect: legacy.execIntegrity },
        retainOptions,
      );
      artifacts[capability.id] = capabilityArtifactEntry(capability.id, capability.rows, retained.execIntegrity.value);
    } else {
      retained = await retainTree(
        realScope,
        { kind: "capture", key: spec.name, source: spec.executable.tree! },
        retainOptions,
      );
    }
    const artifact: ArtifactRefRecord = {
      kind: retained.kind,
      key: retained.key,
      integrity: { format: TREE_EXEC, value: retained.execIntegrity.value },
    };
    const subject: ApprovalSubject = {
      kind: artifact.kind,
      key: artifact.key,
      integrity: integrityText(artifact.integrity),
    };
    await audit(realScope, {
      action: "retain",
      subject: { ...subject },
      outcome: retained.status === "kept" ? "kept" : "ok",
      details: { capture: spec.name, dir: retained.dir },
    });

    // Step 3: pin the exact bytes.
    const configBlob = putBlob(realScope, config.bytes).digest;
    const profileBlob = profile === null ? null : putBlob(realScope, profile.bytes).digest;
    const specBlob = putBlob(realScope, loaded.bytes).digest;

    // Step 4: classification.
    const derived = deriveLevel(config.config, spec.target);
    const effective = stricter(spec.classification, derived.level);
    const mismatch = spec.classification !== derived.level;
    if (mismatch) {
      await audit(realScope, {
        action: "security-event",
        subject: { capture: spec.name },
        outcome: "event",
        details: {
          event: "declared-derived-mismatch",
          declared: spec.classification,
          derived: derived.level,
          effective,
          target: { ...spec.target },
          config: configBlob,
        },
      });
    }

    // Step 5: the record.
    const record: ResolutionRecord = {
      schemaVersion: 1,
      kind: "capture",
      status: "complete",
      subject: { capture: spec.name },
      source: null,
      artifacts,
      config: {},
      bindings: {},
      messaging: null,
      entrypoints: {
        [spec.name]: { artifact, path: spec.executable.path, args: [...spec.executable.args], role: "command" },
      },
      capture: {
        name: spec.name,
        entrypoint: spec.name,
        target: { ...spec.target },
        classification: {
          declared: spec.classification,
          derived: derived.level,
          effective,
          config: configBlob,
          configPath: spec.classificationConfig,
        },
        profile: profileBlob,
        env: { ...spec.env },
        credentials: spec.credentials.map((name) => ({ kind: "env" as const, name })),
        spec: { path: loaded.path, blob: specBlob },
        ...(spec.privileged === true ? { privileged: true as const } : {}),
      },
      evidence: [],
      unresolved: [],
    };
    await resolveEntrypoint(realScope, spec.name, record.entrypoints[spec.name]!);
    const composition = compositionOf(record);
    const approvalSubject = compositionSubject(composition);
    const compositionBlob = putBlob(realScope, canonicalJsonBytes(composition)).digest;
    const written = writeResolution(realScope, record);

    // Step 6: audit.
    await audit(realScope, {
      action: "prepare",
      subject: { ...subjectOfSpec, resolution: written.id },
      outcome: written.status === "kept" ? "kept" : "ok",
      details: {
        ...(options.auditDetails ?? {}),
        executable: { ...subject },
        composition: { ...approvalSubject },
        classification: { declared: spec.classification, derived: derived.level, effective },
        blobs: { config: configBlob, profile: profileBlob, spec: specBlob, composition: compositionBlob },
      },
    });
    return {
      id: written.id,
      status: written.status,
      record,
      subject,
      composition: { subject: approvalSubject, value: composition },
      retained,
      classification: { declared: spec.classification, derived, effective, mismatch },
      blobs: { config: configBlob, profile: profileBlob, spec: specBlob, composition: compositionBlob },
    };
  });
}
