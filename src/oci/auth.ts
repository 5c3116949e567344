import type { OatsError } from "../core/index.js";
import type { Credentials } from "./credentials.js";
import { checkOrigin, drain, readBody, registryRefusal, send, type TransportOptions } from "./http.js";
import { isLoopbackHost } from "./reference.js";

/**
 * The registry's 401 challenge and the answer to it: Basic with the
 * credentials, or the distribution token flow (GET the realm with service
 * and scope, Basic auth if we have credentials, then Bearer). A realm is a
 * URL the registry chose, so it obeys the same origin rule as the registry:
 * HTTPS, or plain HTTP only on loopback.
 */

export interface Challenge {
  readonly scheme: "basic" | "bearer";
  readonly params: Readonly<Record<string, string>>;
}

const MAX_TOKEN_RESPONSE = 1 << 20;

/** Parse one `WWW-Authenticate` value (RFC 7235 auth-params, quoted or token values). */
export function parseChallenge(header: string | undefined): Challenge | null {
  if (!header) return null;
  const match = /^\s*([A-Za-z]+)\s*(.*)$/s.exec(header);
  if (!match) return null;
  const scheme = match[1]!.toLowerCase();
  if (scheme !== "basic" && scheme !== "bearer") return null;
  const params: Record<string, string> = Object.create(null);
  const pattern = /([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]*))\s*(?:,|$)\s*/gy;
  const rest = match[2]!;
  pattern.lastIndex = 0;
  while (pattern.lastIndex < rest.length) {
    const at = pattern.lastIndex;
    const part = pattern.exec(rest);
    if (!part || part.index !== at) break;
    params[part[1]!.toLowerCase()] = part[2] !== undefined ? part[2].replace(/\\(.)/g, "$1") : part[3]!;
  }
  return { scheme, params };
}

export function basicHeader(credentials: Credentials): string {
  return `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`, "utf8").toString("base64")}`;
}

/** The Authorization header that answers `challenge`, fetching a token when it is a Bearer challenge. */
export async function answerChallenge(
  challenge: Challenge,
  credentials: Credentials | null,
  registryHost: string,
  options: TransportOptions = {},
): Promise<string> {
  if (challenge.scheme === "basic") {
    if (!credentials)
      throw unauthorized(registryHost, "the registry asks for Basic auth and no credentials are configured");
    return basicHeader(credentials);
  }
  const realmText = challenge.params["realm"];
  let realm: URL;
  try {
    realm = new URL(realmText ?? "");
  } catch {
    throw registryRefusal(
      "auth-realm",
      `the registry at ${registryHost} sent a Bearer challenge without a usable realm`,
      { host: registryHost },
    );
  }
  if (realm.protocol !== "https:" && !(realm.protocol === "http:" && isLoopbackHost(realm.hostname))) {
    throw registryRefusal(
      "auth-realm",
      `the token realm ${realm.host} is not HTTPS (plain HTTP only on loopback); no credentials were sent`,
      { host: registryHost, realm: realm.origin },
    );
  }
  if (realm.username || realm.password)
    throw registryRefusal("auth-realm", `the token realm of ${registryHost} carries credentials`, {
      host: registryHost,
    });
  checkOrigin(realm);
  if (challenge.params["service"]) realm.searchParams.set("service", challenge.params["service"]);
  for (const scope of (challenge.params["scope"] ?? "").split(" ").filter(Boolean))
    realm.searchParams.append("scope", scope);
  const headers: Record<string, string> = { accept: "application/json" };
  if (credentials) headers["authorization"] = basicHeader(credentials);
  const response = await send({ method: "GET", url: realm, headers }, options);
  if (response.statusCode !== 200) {
    await drain(response);
    throw unauthorized(registryHost, `the token service ${realm.host} refused (HTTP ${response.statusCode})`, {
      realm: realm.origin,
      status: response.statusCode,
    });
  }
  const body = await readBody(response, MAX_TOKEN_RESPONSE, () =>
    registryRefusal("protocol", `the token service ${realm.host} answered more than ${MAX_TOKEN_RESPONSE} bytes`, {
      host: registryHost,
    }),
  );
  let token: unknown;
  try {
    const parsed = JSON.parse(body.toString("utf8")) as { token?: unknown; access_token?: unknown };
    token = parsed.token ?? parsed.access_token;
  } catch {
    token = undefined;
  }
  // A token goes into a header: refuse anything that could split it.
  if (typeof token !== "string" || !/^[\x21-\x7e]{1,16384}$/.test(token)) {
    throw registryRefusal("protocol", `the token service ${realm.host} answered without a usable token`, {
      host: registryHost,
    });
  }
  return `Bearer ${token}`;
}

export function unauthorized(host: string, message: string, details: Record<string, unknown> = {}): OatsError {
  return registryRefusal("unauthorized", `${host}: ${message}`, { host, ...details });
}
