import { closeSync, constants, fstatSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { OatsError, canonicalJsonBytes, errnoCode } from "../core/index.js";
import { audit, auditRefusal, currentPrincipal, scopeStateDir, stateRoot, writePrivateFile } from "../ledger/index.js";
import { assertIdentifier, resolveScope, withFileLock } from "../retention/index.js";
import { parsePublicKey, type PublicKeyInfo } from "./keys.js";

/**
 * Which keys this operator trusts in one scope, and for what: the local
 * operator's decision, kept in the operator's private state for that scope
 * (`<state>/scopes/<sha256 of the scope's realpath>/trust.json`, 0600 in a
 * 0700 directory), never in the scope, which other writers can edit. Each
 * change is audited in the scope's audit log (`trust-add`, `trust-remove`).
 *
 * An entry is `{name, purpose, keyid, publicKey, addedAt, addedBy}`:
 * `approvals` lets `dispatch --approved-by <name>` run a composition under
 * that key's signed approval; `runs` lets `oats attestation verify` believe
 * that key's run statements. A removed entry is kept under `removed`, so a
 * statement of a key whose trust was withdrawn is refused as such
 * (`trust-removed`), not as an unknown key.
 */

export const TRUST_PURPOSES = ["approvals", "runs"] as const;
export type TrustPurpose = (typeof TRUST_PURPOSES)[number];
const TRUST_FILE = "trust.json";
const TRUST_FORMAT = "oats.trust.v1";
const MAX_TRUST_BYTES = 1024 * 1024;

const entrySchema = z
  .object({
    name: z.string().min(1),
    purpose: z.enum(TRUST_PURPOSES),
    keyid: z.string().regex(/^sha256:[0-9a-f]{64}$/),
    publicKey: z.string().min(1),
    addedAt: z.string().min(1),
    addedBy: z.string().min(1),
  })
  .strict();
const removedSchema = entrySchema.extend({ removedAt: z.string().min(1), removedBy: z.string().min(1) }).strict();
const trustFileSchema = z
  .object({ format: z.literal(TRUST_FORMAT), entries: z.array(entrySchema), removed: z.array(removedSchema) })
  .strict();

export type TrustEntry = z.infer<typeof entrySchema>;
export type RemovedTrust = z.infer<typeof removedSchema>;
export interface TrustStore {
  readonly entries: readonly TrustEntry[];
  readonly removed: readonly RemovedTrust[];
}

function stateDir(realScope: string): string {
  const dir = scopeStateDir(realScope);
  if (dir === null)
    throw new OatsError(
      "invalid-artifact-store",
      `the operator's state ${stateRoot()} is not private (a real directory of this account that nobody else can ` +
        "write, and every level below it): trust is neither read nor written there",
      { path: stateRoot(), reason: "state-unsafe" },
    );
  return dir;
}

function damaged(path: string, why: string): OatsError {
  return new OatsError("invalid-artifact-store", `the trust file ${path} is damaged (${why}); nothing is trusted`, {
    path,
    reason: "trust-damaged",
  });
}

/** The scope's trust, read from the operator's private state (empty when nothing was ever trusted). */
export function readTrust(scope: string): TrustStore {
  const realScope = resolveScope(scope);
  const path = join(stateDir(realScope), TRUST_FILE);
  let bytes: Buffer;
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const stats = fstatSync(fd);
      if (!stats.isFile() || stats.size > MAX_TRUST_BYTES) throw damaged(path, "not a small regular file");
      if ((stats.mode & 0o077) !== 0) throw damaged(path, `its mode is ${(stats.mode & 0o777).toString(8)}`);
      bytes = readFileSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return { entries: [], removed: [] };
    if (error instanceof OatsError) throw error;
    throw damaged(path, errnoCode(error) ?? "unreadable");
  }
  let parsed: z.infer<typeof trustFileSchema>;
  try {
    parsed = trustFileSchema.parse(JSON.parse(bytes.toString("utf8")));
  } catch {
    throw damaged(path, "not an oats.trust.v1 document");
  }
  return { entries: parsed.entries, removed: parsed.removed };
}

function writeTrust(dir: string, store: TrustStore): void {
  writePrivateFile(
    dir,
    TRUST_FILE,
    canonicalJsonBytes({ format: TRUST_FORMAT, entries: store.entries, removed: store.removed }),
  );
}

function withTrustLock<T>(dir: string, body: () => Promise<T>): Promise<T> {
  return withFileLock(
    {
      target: join(dir, TRUST_FILE),
      lockfilePath: join(dir, "trust.lock"),
      waitMs: 10_000,
      minTimeout: 20,
      maxTimeout: 200,
      factor: 1.5,
      failure: (error) =>
        new OatsError("busy", "the trust file is locked by another oats process", {
          reason: "trust-locked",
          cause: error instanceof Error ? error.message : String(error),
        }),
    },
    () => body(),
  );
}

function checkPurpose(value: unknown): TrustPurpose {
  if (!TRUST_PURPOSES.includes(value as TrustPurpose))
    throw new OatsError("invalid-input", `--for is one of ${TRUST_PURPOSES.join(", ")}`, {
      reason: "trust-purpose",
      purpose: String(value).slice(0, 100),
    });
  return value as TrustPurpose;
}

export interface TrustChange {
  readonly entry: TrustEntry;
  readonly status: "added" | "kept" | "removed";
  readonly audit: { readonly seq: number; readonly hash: string } | null;
}

/**
 * Trust a public key for one purpose under a name. The name and the key are
 * checked first; the same name, key and purpose again is `kept`; a name in
 * use for another key or purpose is refused (`invalid-input`,
 * `trust-exists`): remove it first. Audited before the file changes, so no
 * trust exists that the audit log does not show.
 */
export async function addTrust(
  scope: string,
  input: { readonly publicKey: string; readonly name: string; readonly purpose: string },
): Promise<TrustChange> {
  const realScope = resolveScope(scope);
  const subject = { name: String(input.name).slice(0, 214), purpose: String(input.purpose).slice(0, 100) };
  try {
    const name = assertIdentifier(input.name, "trust name");
    const purpose = checkPurpose(input.purpose);
    const { info } = parsePublicKey(input.publicKey);
    const dir = stateDir(realScope);
    return await withTrustLock(dir, async () => {
      const store = readTrust(realScope);
      const existing = store.entries.find((entry) => entry.name === name);
      if (existing !== undefined) {
        if (existing.keyid === info.keyid && existing.purpose === purpose)
          return { entry: existing, status: "kept" as const, audit: null };
        throw new OatsError(
          "invalid-input",
          `a trust named ${name} exists for ${existing.purpose} (${existing.keyid}); \`oats trust rm ${name}\` first`,
          { reason: "trust-exists", name, keyid: existing.keyid, purpose: existing.purpose },
        );
      }
      const entry: TrustEntry = {
        name,
        purpose,
        keyid: info.keyid,
        publicKey: info.spki,
        addedAt: new Date().toISOString(),
        addedBy: currentPrincipal(),
      };
      const entryAudit = await audit(realScope, {
        action: "trust-add",
        subject: { name, keyid: info.keyid, purpose },
        outcome: "ok",
        details: { stateDir: dir },
      });
      writeTrust(dir, { entries: [...store.entries, entry], removed: store.removed });
      return { entry, status: "added" as const, audit: { seq: entryAudit.seq, hash: entryAudit.hash } };
    });
  } catch (error) {
    throw await auditRefusal(realScope, "trust-add", subject, error);
  }
}

/**
 * Withdraw a trust: from now on nothing signed by its key is believed for
 * its purpose (a statement signed before is refused too, `trust-removed`).
 * The file changes first, then the audit entry is written: removing trust
 * is the safe direction and must not wait for the log.
 */
export async function removeTrust(scope: string, nameInput: string): Promise<TrustChange> {
  const realScope = resolveScope(scope);
  const subject = { name: String(nameInput).slice(0, 214) };
  try {
    const name = assertIdentifier(nameInput, "trust name");
    const dir = stateDir(realScope);
    const { entry } = await withTrustLock(dir, async () => {
      const store = readTrust(realScope);
      const found = store.entries.find((each) => each.name === name);
      if (found === undefined)
        throw new OatsError("invalid-input", `no trust is named ${name} in this scope (\`oats trust ls\`)`, {
          reason: "trust-unknown",
          name,
        });
      const removed: RemovedTrust = { ...found, removedAt: new Date().toISOString(), removedBy: currentPrincipal() };
      writeTrust(dir, {
        entries: store.entries.filter((each) => each !== found),
        removed: [...store.removed, removed],
      });
      return { entry: found };
    });
    const entryAudit = await audit(realScope, {
      action: "trust-remove",
      subject: { name, keyid: entry.keyid, purpose: entry.purpose },
      outcome: "ok",
    });
    return { entry, status: "removed", audit: { seq: entryAudit.seq, hash: entryAudit.hash } };
  } catch (error) {
    throw await auditRefusal(realScope, "trust-remove", subject, error);
  }
}

/** The public key of a trust entry (its stored SPKI, parsed again). */
export function trustedKey(
  entry: TrustEntry,
): PublicKeyInfo & { publicKey: ReturnType<typeof parsePublicKey>["publicKey"] } {
  const { publicKey, info } = parsePublicKey(entry.publicKey);
  if (info.keyid !== entry.keyid)
    throw new OatsError("invalid-artifact-store", `trust ${entry.name}: its key does not have its key id`, {
      reason: "trust-damaged",
      name: entry.name,
    });
  return { ...info, publicKey };
}
