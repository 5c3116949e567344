import { isIP } from "node:net";
import { z } from "zod";
import { OatsError } from "../core/index.js";

/**
 * `oci://host[:port]/repository[:tag|@digest]` (HTTPS) or
 * `http://host[:port]/...` (plain HTTP, loopback only). The repository and
 * tag grammar is the distribution spec's; only sha256 digests are accepted,
 * the one algorithm every registry and the oats mapping share.
 */

// distribution-spec: <name> path components, each [a-z0-9]+ joined by . _ __ or -+
const COMPONENT = "[a-z0-9]+(?:(?:\\.|_|__|-+)[a-z0-9]+)*";
export const REPOSITORY_PATTERN = new RegExp(`^${COMPONENT}(?:/${COMPONENT})*$`);
export const TAG_PATTERN = /^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$/;
export const DIGEST_PATTERN = /^sha256:[a-f0-9]{64}$/;
// Docker's reference grammar caps the name (host + path) at 255 characters.
const MAX_NAME = 255;
const DNS_LABEL = /^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$/;

export const repositorySchema = z.string().max(MAX_NAME).regex(REPOSITORY_PATTERN);
export const tagSchema = z.string().regex(TAG_PATTERN);
export const digestSchema = z.string().regex(DIGEST_PATTERN);

export interface OciRegistry {
  /** Host name or address as written, IPv6 without brackets. */
  readonly hostname: string;
  readonly port: number | null;
  /** `host[:port]` as used for credential lookup and the Host header (IPv6 bracketed). */
  readonly host: string;
  readonly scheme: "https" | "http";
}

export interface OciReference {
  readonly registry: OciRegistry;
  readonly repository: string;
  readonly tag: string | null;
  readonly digest: string | null;
}

function refuse(text: string, problem: string): OatsError {
  // The text is the operator's own reference; it may carry user:pass@, which is refused below before anyone echoes it.
  return new OatsError("invalid-artifact-reference", `not an OCI reference (${problem})`, {
    reference: text.length > 512 ? `${text.slice(0, 512)}...` : text,
    problem,
  });
}

function validHostname(hostname: string): boolean {
  if (isIP(hostname) !== 0) return true;
  if (hostname.length > 253) return false;
  return hostname.split(".").every((label) => DNS_LABEL.test(label));
}

/** True for 127.0.0.0/8, ::1 (and its v4-mapped forms of 127/8) and `localhost`. */
export function isLoopbackHost(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/^\[|\]$/g, "");
  if (name === "localhost") return true;
  if (isIP(name) === 4) return name.split(".")[0] === "127";
  if (isIP(name) === 6) {
    if (name === "::1" || name === "0:0:0:0:0:0:0:1") return true;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(name);
    return mapped !== null && mapped[1]!.split(".")[0] === "127";
  }
  return false;
}

export function parseOciReference(text: string, options: { requireRepository?: boolean } = {}): OciReference {
  if (typeof text !== "string" || text.length === 0) throw refuse(String(text), "empty");
  if (text.length > 1024) throw refuse(text, "longer than 1024 characters");
  const schemeMatch = /^(oci|http):\/\//.exec(text);
  if (!schemeMatch) throw refuse(text, "must start with oci:// or http://");
  const scheme = schemeMatch[1] === "http" ? "http" : "https";
  const rest = text.slice(schemeMatch[0].length);
  const slash = rest.indexOf("/");
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  let path = slash < 0 ? "" : rest.slice(slash + 1);
  if (authority.includes("@")) {
    // Never echo a reference that may hold a password.
    throw new OatsError(
      "invalid-artifact-reference",
      "an OCI reference must not carry credentials; use OATS_REGISTRY_USER/OATS_REGISTRY_PASSWORD or a Docker config",
      { problem: "credentials-in-reference" },
    );
  }
  const hostMatch = /^(\[[0-9a-fA-F:.]+\]|[^:/[\]]+)(?::(\d{1,5}))?$/.exec(authority);
  if (!hostMatch) throw refuse(text, "bad host");
  const hostname = hostMatch[1]!.replace(/^\[|\]$/g, "");
  if (!validHostname(hostname) || (hostMatch[1]!.startsWith("[") && isIP(hostname) !== 6))
    throw refuse(text, "bad host");
  const port = hostMatch[2] === undefined ? null : Number(hostMatch[2]);
  if (port !== null && (port < 1 || port > 65535)) throw refuse(text, "bad port");
  let digest: string | null = null;
  let tag: string | null = null;
  const at = path.indexOf("@");
  if (at >= 0) {
    digest = path.slice(at + 1);
    path = path.slice(0, at);
    if (!digestSchema.safeParse(digest).success) throw refuse(text, "digest must be sha256:<64 hex>");
  }
  const colon = path.lastIndexOf(":");
  if (colon >= 0) {
    tag = path.slice(colon + 1);
    path = path.slice(0, colon);
    if (!tagSchema.safeParse(tag).success) throw refuse(text, "bad tag");
  }
  if (path === "") {
    if (options.requireRepository !== false) throw refuse(text, "no repository");
  } else if (!repositorySchema.safeParse(path).success || authority.length + 1 + path.length > MAX_NAME) {
    throw refuse(text, "bad repository name");
  }
  const bracketed = isIP(hostname) === 6 ? `[${hostname}]` : hostname;
  return {
    registry: { hostname, port, host: port === null ? bracketed : `${bracketed}:${port}`, scheme },
    repository: path,
    tag,
    digest,
  };
}

/** The reference as text, never with credentials (it never holds any). */
export function formatOciReference(ref: OciReference): string {
  const scheme = ref.registry.scheme === "http" ? "http" : "oci";
  const suffix = ref.digest ? `@${ref.digest}` : ref.tag ? `:${ref.tag}` : "";
  return `${scheme}://${ref.registry.host}/${ref.repository}${ref.tag && ref.digest ? `:${ref.tag}` : ""}${suffix}`;
}
