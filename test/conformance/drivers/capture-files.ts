/**
 * The files a capture request becomes, for every driver: a tool tree with
 * the script as its entry point, a classification config, a profile and a
 * capture spec (docs/design/captures.md, "Preparing"). Drivers then prepare
 * from the spec through their own path (library call or CLI).
 */
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { join } from "node:path";
import type { CaptureRequest } from "../driver.js";

export const PINNED_PATH = "/usr/bin:/bin";

/** The principal as dispatch computes it (`user@host`), for the classification config. */
export function principalName(): string {
  return `${userInfo().username}@${hostname()}`;
}

export interface CaptureFiles {
  readonly home: string;
  readonly spec: string;
  /** The entry point inside the tool tree (relative), e.g. bin/run. */
  readonly entry: string;
}

/** The profile's YAML (JSON is YAML) for a request: required evidence classes and redaction patterns. */
export function profileValue(request: CaptureRequest): Record<string, unknown> | null {
  const profile = request.profile;
  if (profile === undefined) return null;
  const value: Record<string, unknown> = { schemaVersion: 1 };
  if (profile.requiredClasses !== undefined) value["evidence"] = { required: [...profile.requiredClasses] };
  if (profile.redact !== undefined && profile.redact.length > 0) {
    value["redact"] = profile.redact.map((pattern) => ({
      name: pattern.name,
      pattern: pattern.source,
      ...(pattern.flags === undefined ? {} : { flags: pattern.flags }),
    }));
  }
  return value;
}

/**
 * Write `home/tool/bin/run` (sh, 0755) or `home/tool/bin/run.mjs` (Node,
 * 0644: dispatch starts it under the guarded Node), `home/class.yaml`,
 * `home/profile.yaml` when the request has a profile, and `home/spec.yaml`.
 * `envExtra` changes the pinned env (a mismatched re-prepare); `principal`
 * is who the config names (default: this process's user).
 */
export function writeCaptureFiles(
  home: string,
  request: CaptureRequest,
  options: { envExtra?: Record<string, string>; principal?: string } = {},
): CaptureFiles {
  const envExtra = options.envExtra ?? {};
  mkdirSync(join(home, "tool", "bin"), { recursive: true, mode: 0o755 });
  const entry = request.script.lang === "sh" ? "bin/run" : "bin/run.mjs";
  const path = join(home, "tool", entry);
  writeFileSync(path, request.script.lang === "sh" ? `#!/bin/sh\n${request.script.body}` : request.script.body);
  chmodSync(path, request.script.lang === "sh" ? 0o755 : 0o644);

  const confidential = request.classification === "confidential";
  writeFileSync(
    join(home, "class.yaml"),
    `${JSON.stringify({
      schemaVersion: 1,
      wings: { work: request.classification ?? "internal" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: confidential
        ? { [options.principal ?? principalName()]: request.sovereign === false ? "non-sovereign" : "sovereign" }
        : {},
    })}\n`,
  );
  const profile = profileValue(request);
  if (profile !== null) writeFileSync(join(home, "profile.yaml"), `${JSON.stringify(profile)}\n`);
  const spec = join(home, "spec.yaml");
  writeFileSync(
    spec,
    `${JSON.stringify({
      name: request.name,
      executable: { tree: "./tool", path: entry, args: [] },
      target: { wing: "work" },
      classification: request.classification ?? "internal",
      classificationConfig: "./class.yaml",
      ...(profile === null ? {} : { profile: "./profile.yaml" }),
      env: { PATH: PINNED_PATH, ...request.env, ...envExtra },
      credentials: Object.keys(request.credentials ?? {}),
      ...(request.privileged === true ? { privileged: true } : {}),
    })}\n`,
  );
  return { home, spec, entry };
}
