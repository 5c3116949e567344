import { createHash } from "node:crypto";
import ssri from "ssri";
import { OatsError, asStepError, errnoCode } from "../core/index.js";
import {
  assertArtifactKey,
  assertArtifactKind,
  assertIdentifier,
  type ArtifactKind,
  TREE_EXEC,
  TREE_LEGACY,
  parseTreeIntegrity,
  type TreeFormat,
  capabilityRows,
  parseLock,
  adoptCapabilityArtifact,
  adoptTree,
  type RetainOptions,
  inspectStore,
  inspectStoreAt,
  resolveScope,
  EXTRACT_STORE,
  revisionParentSegments,
  type HeldFile,
} from "../retention/index.js";
import type { ArtifactReceipt, IntegrityInput, OatsLockInput } from "../retention/index.js";
import { openArchive } from "./archive-file.js";
import { extractLimits, extractTar, type ExtractLimits } from "./extract.js";
import { withExtractionDir } from "./staging.js";

/**
 * Retain straight from an npm-style package tarball (entries under
 * `package/`). In order:
 *
 * 1. everything that can be checked without writing is checked: the request
 *    (id and lock rows, or kind, key and expected integrity), the tarball
 *    integrity's form, the limits, the store components, the extraction
 *    store, and that the tarball is a regular file. A bad request creates
 *    nothing;
 * 2. with `tarballIntegrity` (package-lock.json's `sha512-...`), the tarball
 *    bytes are checked with ssri before anything is extracted:
 *    `integrity-mismatch`, nothing created;
 * 3. the tarball is extracted by extractTar (typed refusals for every unsafe
 *    entry) into `<scope>/.agents/extract/.staging-<host>-<pid>-<random>/`,
 *    hashing the bytes as they are read. If an integrity was given, the
 *    bytes read this second time must be the bytes checked the first time
 *    (a tarball replaced in between is refused);
 * 4. the extracted tree goes through the normal retention checks
 *    (adoptCapabilityArtifact or adoptTree: the checks of
 *    retainCapabilityArtifact and retainTree), but it is not copied: it is
 *    renamed into a staging directory beside its revision, made durable,
 *    read back once in every format, compared with the lock row or `expect`,
 *    checked for provenance and renamed into place (publishAdopted in
 *    store/publish.ts). On another filesystem it is copied as before;
 * 5. whatever is left of the extraction directory, and the extraction store
 *    root if this call created it, are always removed.
 *
 * The receipt is the normal receipt plus `tarballIntegrity`, the sha512 SRI
 * of the tarball bytes.
 */

export interface TarballCapabilityRequest {
  /** The capability id; retained at its lock row's integrity with its provenance checked. */
  readonly id: string;
  /** The lock whose rows name the capability's integrity and provenance. */
  readonly lock: OatsLockInput;
}

export interface TarballTreeRequest {
  readonly kind: ArtifactKind;
  /** A capability id or capture name, or for a source the 64-hex identity key. */
  readonly key: string;
  /** The oats.tree-exec.v1 integrity the extracted tree must have. */
  readonly expect?: IntegrityInput;
}

export type RetainTarballRequest = (TarballCapabilityRequest | TarballTreeRequest) & {
  /** An SRI string (sha512, sha384 or sha256), e.g. a package-lock.json `integrity`. */
  readonly tarballIntegrity?: string;
  readonly limits?: Partial<ExtractLimits>;
};

export interface TarballReceipt extends ArtifactReceipt {
  /** sha512 SRI of the tarball bytes. */
  readonly tarballIntegrity: string;
}

const DIGEST_BYTES: Record<string, number> = { sha256: 32, sha384: 48, sha512: 64 };

function invalidIntegrity(value: unknown, message: string): OatsError {
  return new OatsError("invalid-input", `invalid tarball integrity ${JSON.stringify(value)}: ${message}`, {
    tarballIntegrity: value,
    reason: "invalid-tarball-integrity",
  });
}

/**
 * An SRI string of sha256/384/512 hashes with digests of the right length, its tokens joined by one space;
 * anything else, sha1 and md5 included (too weak to check a tarball by), is refused with `invalid-input`,
 * reason `invalid-tarball-integrity`.
 */
export function parseTarballIntegrity(value: string): string {
  if (typeof value !== "string" || value.trim() === "")
    throw invalidIntegrity(value, "expected an SRI string such as sha512-<base64>");
  const tokens = value.trim().split(/\s+/);
  for (const token of tokens) {
    const match = /^([a-z0-9]+)-([A-Za-z0-9+/]+={0,2})$/.exec(token);
    if (!match) throw invalidIntegrity(value, `${JSON.stringify(token)} is not <algorithm>-<base64 digest>`);
    const [, algorithm, digest] = match as unknown as [string, string, string];
    const length = DIGEST_BYTES[algorithm];
    if (length === undefined)
      throw invalidIntegrity(value, `${algorithm} is not accepted (use sha512, sha384 or sha256)`);
    const bytes = Buffer.from(digest, "base64");
    if (bytes.length !== length || bytes.toString("base64") !== digest)
      throw invalidIntegrity(value, `a ${algorithm} digest is ${length} bytes of base64`);
  }
  return tokens.join(" ");
}

type Plan =
  | {
      readonly mode: "capability";
      readonly id: string;
      readonly lock: OatsLockInput;
      readonly kind: "capability";
      readonly key: string;
      readonly format: TreeFormat;
    }
  | {
      readonly mode: "tree";
      readonly kind: ArtifactKind;
      readonly key: string;
      readonly expect?: IntegrityInput;
      readonly format: TreeFormat;
    };

/** Validate the request the way the directory retains do, before anything is read or written. */
function plan(request: RetainTarballRequest): Plan {
  if (request === null || typeof request !== "object")
    throw new OatsError("invalid-input", "a tarball retain request is an object", {});
  if ("lock" in request && request.lock !== undefined) {
    const { id, lock } = request as TarballCapabilityRequest & { kind?: unknown; expect?: unknown };
    const other = request as { kind?: unknown; expect?: unknown };
    if (other.kind !== undefined && other.kind !== "capability")
      throw new OatsError("invalid-input", `a lock retains a capability, not a ${String(other.kind)}`, {
        kind: other.kind,
      });
    if (other.expect !== undefined)
      throw new OatsError(
        "invalid-input",
        "a lock and an expected integrity cannot be used together: the lock's capability row names the integrity",
        {},
      );
    const capabilityId = assertIdentifier(id, "capability id");
    const rows = capabilityRows(parseLock(lock), capabilityId);
    parseTreeIntegrity(rows.capability.integrity, [TREE_LEGACY]);
    return { mode: "capability", id: capabilityId, lock, kind: "capability", key: capabilityId, format: TREE_LEGACY };
  }
  const tree = request as TarballTreeRequest & { id?: unknown };
  const kind = assertArtifactKind(tree.kind ?? "capability");
  const key = assertArtifactKey(kind, tree.key ?? tree.id);
  if (tree.expect !== undefined) parseTreeIntegrity(tree.expect, [TREE_EXEC]);
  return { mode: "tree", kind, key, ...(tree.expect === undefined ? {} : { expect: tree.expect }), format: TREE_EXEC };
}

function tarballFile(path: string): HeldFile {
  if (typeof path !== "string" || path === "")
    throw new OatsError("invalid-input", "a tarball path is required", { tarball: path });
  return openArchive(path, "tarball");
}

function sha512Text(hash: ReturnType<typeof createHash>): string {
  return `sha512-${hash.digest("base64")}`;
}

/** Read the tarball once through ssri's integrity stream; refuse before extraction when it does not match. */
function checkTarballIntegrity(archive: HeldFile, expected: string): Promise<string> {
  const tarball = archive.path;
  return new Promise<string>((resolvePromise, reject) => {
    const input = archive.stream();
    const check = ssri.integrityStream({ integrity: expected, algorithms: ["sha512"], strict: true });
    let settled = false;
    const done = (error: unknown, value?: string) => {
      if (settled) return;
      settled = true;
      input.destroy();
      if (error === null) resolvePromise(value!);
      else reject(error);
    };
    input.on("error", (error) =>
      done(
        new OatsError("invalid-input", `cannot read tarball ${tarball}: ${error.message}`, {
          tarball,
          errno: errnoCode(error),
        }),
      ),
    );
    check.on("integrity", (found: ssri.Integrity) =>
      done(null, (found as unknown as { sha512: ssri.Hash[] }).sha512[0]!.toString()),
    );
    check.on("error", (error: Error & { code?: string; found?: ssri.Integrity; algorithm?: string }) => {
      if (error.code !== "EINTEGRITY" || !error.found)
        return done(asStepError("tarball-integrity", error, { tarball }));
      const algorithm = error.algorithm ?? "sha512";
      const found = error.found as unknown as Record<string, ssri.Hash[]>;
      done(
        new OatsError(
          "integrity-mismatch",
          `tarball ${tarball}: expected ${expected}, found ` +
            `${algorithm}-${found[algorithm]?.[0]?.digest ?? "?"}; nothing was extracted`,
          {
            tarball,
            reason: "tarball-integrity",
            algorithm,
            expected,
            actual: found[algorithm]?.[0]?.toString() ?? null,
            actualSha512: found.sha512?.[0]?.toString() ?? null,
          },
        ),
      );
    });
    check.resume();
    input.pipe(check);
  });
}

/** Extract into `staging`, hashing every byte read; returns the sha512 SRI of what was read. */
async function extractHashing(
  archive: HeldFile,
  staging: string,
  limits: ExtractLimits,
  options: RetainOptions,
): Promise<string> {
  const tarball = archive.path;
  const input = archive.stream();
  const hash = createHash("sha512");
  input.on("data", (chunk) => hash.update(chunk));
  await extractTar(input, staging, {
    origin: tarball,
    prefix: "package",
    limits,
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return sha512Text(hash);
}

/**
 * Retain straight from an npm-style package tarball, in the order src/acquisition/tarball.ts gives: a capability by its
 * lock row (`{id, lock}`), or a tree by `{kind, key, expect?}`. Refuses a bad request or tarball integrity
 * (`invalid-input`) before anything is created, tarball bytes that differ from `tarballIntegrity`
 * (`integrity-mismatch`), an unsafe entry (the refusals of {@link extractTar}), and then what the directory retains
 * refuse.
 * @param tarballPath a regular file, opened once and never through a symlink
 * @returns the receipt, with the sha512 SRI of the tarball bytes
 */
export async function retainTarball(
  scope: string,
  tarballPath: string,
  request: RetainTarballRequest,
  options: RetainOptions = {},
): Promise<TarballReceipt> {
  // 1. Read-only checks: nothing is created for a refused request.
  const planned = plan(request);
  const expectedTarball =
    request.tarballIntegrity === undefined ? undefined : parseTarballIntegrity(request.tarballIntegrity);
  const limits = extractLimits(request.limits);
  const realScope = resolveScope(scope);
  inspectStore(realScope, planned.kind, revisionParentSegments(planned.key, planned.format));
  inspectStoreAt(realScope, EXTRACT_STORE);
  const archive = tarballFile(tarballPath);
  try {
    return await retainOpenTarball(realScope, archive, planned, expectedTarball, limits, options);
  } finally {
    await archive.close();
  }
}

/** Steps 2 to 4, every read of the tarball through the descriptor it was checked on (archive-file.ts). */
async function retainOpenTarball(
  realScope: string,
  archive: HeldFile,
  planned: Plan,
  expectedTarball: string | undefined,
  limits: ExtractLimits,
  options: RetainOptions,
): Promise<TarballReceipt> {
  const tarball = archive.path;
  // 2. The tarball's bytes against the integrity the caller holds, before any extraction.
  const checked = expectedTarball === undefined ? undefined : await checkTarballIntegrity(archive, expectedTarball);

  // 3. Extraction into staging only (withExtractionDir: .agents/extract/.staging-*, always removed with any store
  // directory it created);
  // 4. the retention checks, the extracted tree adopted as the revision's staging rather than copied.
  return withExtractionDir(realScope, async (staging) => {
    const read = await extractHashing(archive, staging, limits, options);
    if (checked !== undefined && read !== checked) {
      throw new OatsError(
        "integrity-mismatch",
        `tarball ${tarball} changed while it was read: checked as ${checked}, extracted from ${read}`,
        {
          tarball,
          reason: "tarball-changed",
          expected: checked,
          actual: read,
        },
      );
    }
    // The extracted tree is walked under the same depth limit it was extracted under.
    const walked = { ...options, maxDepth: limits.maxDepth };
    const receipt =
      planned.mode === "capability"
        ? await adoptCapabilityArtifact(realScope, staging, planned.id, planned.lock, walked)
        : await adoptTree(
            realScope,
            {
              kind: planned.kind,
              key: planned.key,
              source: staging,
              ...(planned.expect === undefined ? {} : { expect: planned.expect }),
            },
            walked,
          );
    return { ...receipt, tarballIntegrity: read };
  });
}
