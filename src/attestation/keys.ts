import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from "node:crypto";
import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  linkSync,
  lstatSync,
  openSync,
  readFileSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { OatsError, canonicalJsonBytes, errnoCode } from "../core/index.js";
import { isPrivateDirectory, operatorStateDir, stateRoot } from "../ledger/index.js";
import { fsyncDirectory } from "../retention/index.js";

/**
 * The operator's signing key: one Ed25519 key per operator account, kept in
 * the operator's private state (`<state root>/keys/signing-key.json`, the
 * directory 0700 and the file 0600, every level checked to be a real
 * directory of this account that nobody else can write), never in a scope.
 *
 * The private key never leaves this module except as a KeyObject handed to
 * the signer: it is not in any result, error, log or record. What may be
 * shown is the public key (SPKI, as PEM for `cosign --key`, or its one-line
 * base64 DER) and its key id, `sha256:<hex>` of the SPKI DER.
 */

export const KEYS_DIR = "keys";
export const KEY_FILE = "signing-key.json";
const KEY_FORMAT = "oats.signing-key.v1";
/** A key file is a few hundred bytes; anything much larger is not ours. */
const MAX_KEY_FILE_BYTES = 4096;

const keyFileSchema = z
  .object({
    format: z.literal(KEY_FORMAT),
    algorithm: z.literal("ed25519"),
    createdAt: z.string().min(1),
    keyid: z.string().regex(/^sha256:[0-9a-f]{64}$/),
    publicKey: z.string().min(1),
    privateKey: z.string().min(1),
  })
  .strict();

export interface PublicKeyInfo {
  readonly algorithm: "ed25519";
  /** `sha256:<hex>` of the SPKI DER: the DSSE keyid and the Sigstore bundle's `publicKey.hint`. */
  readonly keyid: string;
  /** The SPKI DER, base64: the one-line form `oats trust add` takes. */
  readonly spki: string;
  /** The same key as a PEM block (`cosign verify-blob-attestation --key`). */
  readonly pem: string;
}

export interface SigningKey extends PublicKeyInfo {
  readonly createdAt: string;
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
}

function euid(): number {
  return typeof process.geteuid === "function" ? process.geteuid() : -1;
}

/** The public half of a key, in every form oats shows it. */
export function describePublicKey(publicKey: KeyObject): PublicKeyInfo {
  const der = publicKey.export({ type: "spki", format: "der" });
  return {
    algorithm: "ed25519",
    keyid: `sha256:${createHash("sha256").update(der).digest("hex")}`,
    spki: der.toString("base64"),
    pem: publicKey.export({ type: "spki", format: "pem" }).toString(),
  };
}

/**
 * A public key an operator hands us: a PEM block (`-----BEGIN PUBLIC KEY-----`)
 * or the one-line base64 SPKI DER `oats key show` prints. Only Ed25519 keys
 * are accepted. The text is never echoed back: a private key pasted by
 * mistake must not end up in an error message.
 */
export function parsePublicKey(text: string): { publicKey: KeyObject; info: PublicKeyInfo } {
  const refuse = (why: string) =>
    new OatsError("invalid-input", `not an Ed25519 public key: ${why}`, { reason: "public-key-invalid" });
  if (typeof text !== "string" || text.trim() === "") throw refuse("empty");
  if (/PRIVATE KEY/.test(text)) throw refuse("this is a private key; give the public key (`oats key show`)");
  let publicKey: KeyObject;
  try {
    const trimmed = text.trim();
    publicKey = trimmed.includes("-----BEGIN PUBLIC KEY-----")
      ? createPublicKey({ key: trimmed, format: "pem" })
      : (() => {
          if (!/^[A-Za-z0-9+/]+={0,2}$/.test(trimmed)) throw new Error("not base64");
          return createPublicKey({ key: Buffer.from(trimmed, "base64"), format: "der", type: "spki" });
        })();
  } catch {
    throw refuse("it is neither a PEM public key nor the base64 SPKI `oats key show` prints");
  }
  if (publicKey.asymmetricKeyType !== "ed25519") throw refuse(`it is a ${publicKey.asymmetricKeyType} key`);
  return { publicKey, info: describePublicKey(publicKey) };
}

/** Where the key file is (it may not exist). */
export function keyPath(): string {
  return join(stateRoot(), KEYS_DIR, KEY_FILE);
}

function unsafe(path: string, why: string): OatsError {
  return new OatsError(
    "invalid-artifact-store",
    `the signing key ${path} is not used: ${why}; it must be a regular file of this account, mode 0600, ` +
      "in a directory only this account can write",
    { path, reason: "key-unsafe" },
  );
}

/**
 * The operator's signing key, or null when there is none. A key file that
 * exists but is not private (a symlink, another owner, readable or writable
 * by others, a directory on the way that others can write) is refused: a
 * key others could read or replace signs nothing.
 */
export function loadSigningKey(): SigningKey | null {
  const path = keyPath();
  let stats;
  try {
    stats = lstatSync(path);
  } catch (error) {
    if (errnoCode(error) === "ENOENT" || errnoCode(error) === "ENOTDIR") return null;
    throw unsafe(path, `it cannot be read (${errnoCode(error) ?? "error"})`);
  }
  const root = stateRoot();
  for (const dir of [root, join(root, KEYS_DIR)])
    if (!isPrivateDirectory(dir)) throw unsafe(path, `${dir} is not a private directory of this account`);
  if (!stats.isFile()) throw unsafe(path, "it is not a regular file");
  if (stats.uid !== euid()) throw unsafe(path, "another account owns it");
  if ((stats.mode & 0o077) !== 0) throw unsafe(path, `its mode is ${(stats.mode & 0o777).toString(8)}`);
  let bytes: Buffer;
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      if (fstatSync(fd).size > MAX_KEY_FILE_BYTES) throw new Error("too large");
      bytes = readFileSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    throw unsafe(path, "it cannot be read");
  }
  let parsed: z.infer<typeof keyFileSchema>;
  try {
    parsed = keyFileSchema.parse(JSON.parse(bytes.toString("utf8")));
  } catch {
    throw new OatsError("invalid-artifact-store", `the signing key ${path} is damaged`, {
      path,
      reason: "key-damaged",
    });
  }
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: Buffer.from(parsed.privateKey, "base64"), format: "der", type: "pkcs8" });
  } catch {
    throw new OatsError("invalid-artifact-store", `the signing key ${path} is damaged`, {
      path,
      reason: "key-damaged",
    });
  }
  const publicKey = createPublicKey(privateKey);
  const info = describePublicKey(publicKey);
  if (privateKey.asymmetricKeyType !== "ed25519" || info.keyid !== parsed.keyid || info.spki !== parsed.publicKey)
    throw new OatsError("invalid-artifact-store", `the signing key ${path} does not match its own public key`, {
      path,
      reason: "key-damaged",
    });
  return { ...info, createdAt: parsed.createdAt, privateKey, publicKey };
}

/**
 * Make the operator's Ed25519 key. Refused when one exists (it is never
 * replaced: statements already signed name it) or when the state directory
 * is not private. Written to a fresh 0600 file, fsync'd, then linked into
 * place, so a crash leaves no key or the whole key.
 */
export function generateSigningKey(now: Date = new Date()): PublicKeyInfo & { readonly createdAt: string } {
  const dir = operatorStateDir(KEYS_DIR);
  if (dir === null)
    throw new OatsError(
      "invalid-artifact-store",
      `the operator's state ${stateRoot()} is not private (a real directory of this account that nobody else can ` +
        "write, and so is every level below it): no key is written there",
      { path: stateRoot(), reason: "state-unsafe" },
    );
  const existing = loadSigningKey();
  if (existing !== null)
    throw new OatsError(
      "invalid-input",
      `this account already has a signing key (${existing.keyid}); it is never replaced`,
      { reason: "key-exists", keyid: existing.keyid },
    );
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const info = describePublicKey(publicKey);
  const createdAt = now.toISOString();
  const bytes = canonicalJsonBytes({
    format: KEY_FORMAT,
    algorithm: "ed25519",
    createdAt,
    keyid: info.keyid,
    publicKey: info.spki,
    privateKey: privateKey.export({ type: "pkcs8", format: "der" }).toString("base64"),
  });
  const temporary = join(dir, `.${KEY_FILE}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(
    temporary,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    try {
      let written = 0;
      while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(temporary, join(dir, KEY_FILE));
    } catch (error) {
      if (errnoCode(error) === "EEXIST")
        throw new OatsError("invalid-input", "this account already has a signing key; it is never replaced", {
          reason: "key-exists",
        });
      throw error;
    }
    fsyncDirectory(dir);
  } finally {
    try {
      unlinkSync(temporary);
    } catch {
      // already gone
    }
  }
  return { ...info, createdAt };
}
