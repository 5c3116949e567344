import { type JsonValue, OatsError } from "../core/index.js";
import { credentialRefSchema } from "./record.js";

/**
 * A pure scanner for secrets in JSON values bound for a resolution record.
 * Records hold no secrets (contract section 8): credentials appear only as
 * references `{kind:"env", name}` or `{kind:"provider", provider, key}`.
 *
 * Three rules:
 * - shapes: any string (value or key) that contains a private key block or a
 *   well-known token shape;
 * - names: any literal (a non-empty string or a number) at or below a key
 *   named like a secret (password, passwd, secret, token, api key, private
 *   key, credential(s)), unless it sits inside a credential reference.
 *
 * A finding names the JSON pointer and the kind of secret, never the value. A
 * key that itself holds a secret shape is reported at its parent's pointer,
 * and not descended into, so no pointer ever contains the secret.
 */

export interface SecretFinding {
  /** RFC 6901 pointer, `pointerPrefix` followed by the path inside the value. */
  readonly pointer: string;
  readonly kind: string;
}

const SHAPES: readonly (readonly [kind: string, pattern: RegExp])[] = [
  ["private-key-block", /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----/],
  ["github-token", /(?<![A-Za-z0-9_])(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}/],
  ["github-token", /(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{20,}/],
  ["aws-access-key", /(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])/],
  ["slack-token", /(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}/],
  ["anthropic-key", /(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{10,}/],
  ["api-secret-key", /(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}/],
  ["google-api-key", /(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}/],
  ["jwt", /(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/],
  ["npm-token", /(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])/],
  // scheme://user:password@host: a password in a connection string or URL.
  ["url-password", /[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s:@/?#]*:[^\s@/?#]+@/],
];

/** The kind of the first secret shape in `text`, if any. */
export function secretShapeOf(text: string): string | undefined {
  for (const [kind, pattern] of SHAPES) if (pattern.test(text)) return kind;
  return undefined;
}

const SECRET_WORDS = new Set([
  "password",
  "passwd",
  "secret",
  "secrets",
  "token",
  "credential",
  "credentials",
  "apikey",
  "privatekey",
  "secretkey",
]);
const KEY_QUALIFIERS = new Set(["api", "private", "secret"]);

/**
 * Whether a key is named like a secret: its last word is a secret noun
 * (`db_password`, `clientSecret`, `GITHUB-TOKEN`, `credentials`), or it ends
 * in `key` qualified by api, private or secret (`api_key`, `apiKey`,
 * `private-key`, `secret_access_key`). Counts and descriptions of secrets are
 * not secrets: `max_tokens`, `token_url`, `secret_name` are ordinary keys.
 */
export function isSecretKeyName(key: string): boolean {
  const words = key
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
  const last = words.at(-1);
  if (last === undefined) return false;
  if (SECRET_WORDS.has(last)) return true;
  return last === "key" && words.slice(0, -1).some((word) => KEY_QUALIFIERS.has(word));
}

export function escapePointerSegment(segment: string): string {
  return segment.replace(/~/g, "~0").replace(/\//g, "~1");
}

function isCredentialRef(value: unknown): boolean {
  return credentialRefSchema.safeParse(value).success;
}

export interface FindSecretsOptions {
  /** The name of the key that holds `value` (e.g. the last segment of a config pointer). */
  readonly key?: string;
}

/**
 * Every place in a value bound for a resolution record that looks like a secret: a string shaped like a
 * token or private key, a key so shaped, or a literal under a secret-named key (`password`, `api_key`)
 * that is not a credential reference. Findings carry a JSON pointer and a kind, never the value.
 * @param pointerPrefix the pointer of `value` in the record, prefixed to every finding's pointer
 * @returns the findings, empty when there are none
 */
export function findSecrets(value: JsonValue, pointerPrefix = "", options: FindSecretsOptions = {}): SecretFinding[] {
  const findings: SecretFinding[] = [];
  const walk = (node: unknown, pointer: string, underSecretName: boolean, inRef: boolean): void => {
    if (typeof node === "string") {
      const shape = secretShapeOf(node);
      if (shape) findings.push({ pointer, kind: shape });
      else if (underSecretName && !inRef && node.length > 0) findings.push({ pointer, kind: "secret-named-literal" });
      return;
    }
    if (typeof node === "number" || typeof node === "bigint") {
      if (underSecretName && !inRef) findings.push({ pointer, kind: "secret-named-literal" });
      return;
    }
    if (Array.isArray(node)) {
      for (const [index, item] of node.entries()) walk(item, `${pointer}/${index}`, underSecretName, inRef);
      return;
    }
    if (typeof node !== "object" || node === null) return;
    const ref = inRef || isCredentialRef(node);
    for (const key of Object.keys(node)) {
      const shape = secretShapeOf(key);
      if (shape) {
        // Never put the key in a pointer: report the object that holds it.
        findings.push({ pointer, kind: `${shape}-in-key` });
        continue;
      }
      walk(
        (node as Record<string, unknown>)[key],
        `${pointer}/${escapePointerSegment(key)}`,
        underSecretName || isSecretKeyName(key),
        ref,
      );
    }
  };
  walk(value, pointerPrefix, options.key !== undefined && isSecretKeyName(options.key), false);
  return findings;
}

/**
 * Secrets in an argument vector: every argument scanned as a value, plus an
 * option named like a secret with its value (`--password=x`, `--db-password
 * x`). One scanner for prepare, capture prepare and reconstruct alike.
 */
export function findArgSecrets(args: readonly string[], pointerPrefix: string): SecretFinding[] {
  const findings = findSecrets([...args], pointerPrefix);
  args.forEach((arg, index) => {
    const option = /^--?([A-Za-z0-9._-]+)(?:=(.*))?$/s.exec(arg);
    if (!option || !isSecretKeyName(option[1]!)) return;
    if (option[2] !== undefined) {
      if (option[2] !== "") findings.push({ pointer: `${pointerPrefix}/${index}`, kind: "secret-named-option" });
    } else if (index + 1 < args.length) {
      findings.push({ pointer: `${pointerPrefix}/${index + 1}`, kind: "secret-named-option" });
    }
  });
  return findings;
}

/** The refusal for a set of findings: pointers and kinds only, never a value. */
export function secretRefusal(findings: readonly SecretFinding[]): OatsError {
  const first = findings[0]!;
  const more = findings.length > 1 ? ` (and ${findings.length - 1} more)` : "";
  return new OatsError(
    "secret-in-record",
    `a secret (${first.kind}) at ${first.pointer}${more} would be written ` +
      `into the resolution record; refer to credentials as ` +
      `{"kind":"env","name":...} or {"kind":"provider","provider":...,"key":...}`,
    {
      pointer: first.pointer,
      kind: first.kind,
      findings: findings.slice(0, 50).map(({ pointer, kind }) => ({ pointer, kind })),
    },
  );
}

/**
 * {@link findSecrets}, refusing with `secret-in-record` (pointers and kinds in `details`, never a value)
 * when it finds any.
 */
export function assertNoSecrets(value: JsonValue, pointerPrefix = "", options: FindSecretsOptions = {}): void {
  const findings = findSecrets(value, pointerPrefix, options);
  if (findings.length > 0) throw secretRefusal(findings);
}
