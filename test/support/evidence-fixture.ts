/**
 * A prepared, approved and queued capture whose executable is the given
 * script (a `#!/bin/sh` script or a Node program written to a temp tree),
 * for the run-evidence tests. Real files, a real retained tree, a real
 * approval: dispatch goes through every check the product does.
 */
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import {
  addJob,
  approve,
  currentPrincipal,
  prepareCapture,
  planQueuedRun,
  type DispatchPlan,
} from "../../src/index.js";
import { tempDir } from "../helpers.js";

export interface EvidenceFixture {
  readonly scope: string;
  readonly home: string;
  readonly job: string;
  readonly resolution: string;
  plan(env?: Record<string, string>): Promise<DispatchPlan>;
}

export interface ScriptOptions {
  /** The script's text; a Node program when `node` is set (run as bin/run.mjs). */
  readonly script: string;
  readonly node?: boolean;
  readonly args?: readonly string[];
  readonly credentials?: readonly string[];
  readonly job?: string;
  /** Approve the composition (default true); false leaves a capture dispatch must refuse. */
  readonly approve?: boolean;
  /** The scope directory (created), instead of a fresh temporary one: a small filesystem, say. */
  readonly scope?: string;
  /** Redaction patterns of a capture profile pinned with the spec (`redact:` entries). */
  readonly redact?: ReadonlyArray<{ name: string; pattern: string; flags?: string }>;
}

export async function evidenceFixture(options: ScriptOptions): Promise<EvidenceFixture> {
  const scope = options.scope ?? tempDir("oats-evidence-");
  mkdirSync(scope, { recursive: true });
  const home = join(scope, "home");
  const tool = join(home, "tool");
  mkdirSync(join(tool, "bin"), { recursive: true });
  mkdirSync(join(home, "conf"), { recursive: true });
  const entry = options.node ? "bin/run.mjs" : "bin/run";
  writeFileSync(join(tool, entry), options.script);
  chmodSync(join(tool, entry), options.node ? 0o644 : 0o755);
  writeFileSync(
    join(home, "conf", "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: { lobby: "public" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    }),
  );
  if (options.redact !== undefined)
    writeFileSync(join(home, "profile.yaml"), stringify({ schemaVersion: 1, redact: [...options.redact] }));
  const specPath = join(home, "spec.yaml");
  writeFileSync(
    specPath,
    stringify({
      name: "evidence-probe",
      executable: { tree: "./tool", path: entry, args: [...(options.args ?? [])] },
      target: { wing: "lobby" },
      classification: "public",
      classificationConfig: "./conf/class.yaml",
      ...(options.redact === undefined ? {} : { profile: "./profile.yaml" }),
      env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
      credentials: [...(options.credentials ?? [])],
      // Tests run as root: only a privileged composition may run there (src/captures/privilege.ts).
      privileged: true,
    }),
  );
  const prepared = await prepareCapture(scope, specPath);
  if (options.approve !== false) await approve(scope, prepared.composition.subject, { reason: "evidence test" });
  const job = options.job ?? "probe";
  await addJob(scope, { job, resolution: prepared.id });
  return { scope, home, job, resolution: prepared.id, plan: (env = {}) => planQueuedRun(scope, job, { env }) };
}
