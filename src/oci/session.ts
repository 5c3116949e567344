import { setMaxListeners } from "node:events";
import type { IncomingMessage } from "node:http";
import type { OatsError } from "../core/index.js";
import { answerChallenge, parseChallenge, unauthorized } from "./auth.js";
import { resolveCredentials, type CredentialOptions, type Credentials } from "./credentials.js";
import {
  checkOrigin,
  drain,
  eitherSignal,
  registryRefusal,
  send,
  type Exchange,
  type TransportOptions,
} from "./http.js";
import type { OciReference } from "./reference.js";
import { DEFAULT_RETRY, isTransientStatus, pause, retryDelay } from "./retry.js";

/**
 * A registry conversation for one repository: it adds the Authorization
 * header (only ever to the registry's own origin), answers a 401 challenge
 * once per exchange, and follows a redirect of a GET or HEAD only within
 * the same origin. A redirect elsewhere (blob storage on another host) is a
 * typed refusal: credentials and trust stay with the host the operator named.
 * The options' `signal` abandons every exchange of the session (a token
 * request and a retry's wait included); an exchange's own `signal` only
 * that one.
 */

export interface SessionOptions extends TransportOptions, CredentialOptions {
  /** Plain HTTP for an `oci://` reference; allowed only for a loopback host. */
  readonly insecure?: boolean;
  /** Explicit credentials (null: anonymous); by default they are resolved from the environment and auth files when
   * first challenged. */
  readonly credentials?: Credentials | null;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_HOPS = 5;

export class RegistrySession {
  readonly origin: string;
  readonly base: URL;
  readonly reference: OciReference;
  #authorization: string | null = null;
  #credentials: Promise<Credentials | null> | null;
  readonly #options: SessionOptions;

  constructor(reference: OciReference, options: SessionOptions = {}) {
    this.reference = reference;
    this.#options = options;
    // Every exchange in flight listens to it (and lets go when it ends): many at once is not a leak.
    if (options.signal) setMaxListeners(0, options.signal);
    const scheme = reference.registry.scheme === "http" || options.insecure ? "http" : "https";
    this.base = new URL(`${scheme}://${reference.registry.host}/`);
    // The origin rule is checked now, before any byte leaves, and again on every send.
    checkOrigin(this.base);
    this.origin = this.base.origin;
    this.#credentials = options.credentials !== undefined ? Promise.resolve(options.credentials) : null;
  }

  get host(): string {
    return this.reference.registry.host;
  }

  /** The signal that abandons every exchange of this session, if one was given. */
  get signal(): AbortSignal | undefined {
    return this.#options.signal;
  }

  /** Milliseconds without socket activity before an exchange is abandoned (TransportOptions.idleTimeoutMs). */
  get idleTimeoutMs(): number {
    return this.#options.idleTimeoutMs ?? 60_000;
  }

  /** The Authorization header a request to `url` carries: the session's, only to the registry's own origin. */
  authorizationFor(url: URL): string | null {
    return url.origin === this.origin ? this.#authorization : null;
  }

  /** `/v2/<repository>/<rest>` on the registry. */
  url(rest: string): URL {
    return new URL(`/v2/${this.reference.repository}/${rest}`, this.base);
  }

  /** A Location the registry handed us, resolved and held to the registry's origin. */
  sameOrigin(location: string | undefined, from: URL, what: string): URL {
    if (!location)
      throw registryRefusal("protocol", `${this.host} answered ${what} without a Location`, { host: this.host });
    let target: URL;
    try {
      target = new URL(location, from);
    } catch {
      throw registryRefusal("protocol", `${this.host} answered ${what} with an unusable Location`, { host: this.host });
    }
    if (target.origin !== this.origin) {
      throw registryRefusal(
        "redirect-other-host",
        `${this.host} sent ${what} to another host (${target.host}); oats only ` +
          `talks to the registry named in the reference`,
        {
          host: this.host,
          target: target.host,
        },
      );
    }
    return target;
  }

  credentials(): Promise<Credentials | null> {
    this.#credentials ??= resolveCredentials(this.host, this.#options);
    return this.#credentials;
  }

  async request(exchange: Exchange): Promise<IncomingMessage> {
    let current = exchange;
    let challenged = false;
    let retried = 0;
    const repeatable = exchange.repeatable === true || exchange.method === "GET" || exchange.method === "HEAD";
    for (let hop = 0; ; ) {
      const headers = { ...current.headers };
      if (this.#authorization && current.url.origin === this.origin) headers["authorization"] = this.#authorization;
      const response = await send({ ...current, headers }, this.#options);
      const signal = eitherSignal(this.#options.signal, exchange.signal);
      const status = response.statusCode ?? 0;
      if (status === 401) {
        await drain(response);
        if (challenged)
          throw unauthorized(this.host, "the registry refused the credentials", {
            source: (await this.credentials())?.source ?? "anonymous",
          });
        challenged = true;
        const challenge = parseChallenge(response.headers["www-authenticate"]);
        if (!challenge) throw unauthorized(this.host, "the registry answered 401 without a Basic or Bearer challenge");
        this.#authorization = await answerChallenge(challenge, await this.credentials(), this.host, {
          ...this.#options,
          ...(exchange.signal ? { signal: eitherSignal(this.#options.signal, exchange.signal) } : {}),
        });
        continue;
      }
      if (REDIRECTS.has(status) && (current.method === "GET" || current.method === "HEAD")) {
        await drain(response);
        const target = this.sameOrigin(response.headers.location, current.url, `a redirect of ${current.method}`);
        if (++hop > MAX_HOPS)
          throw registryRefusal("protocol", `${this.host} redirected more than ${MAX_HOPS} times`, { host: this.host });
        current = { ...exchange, url: target };
        continue;
      }
      if (repeatable && isTransientStatus(status) && retried < DEFAULT_RETRY.retries) {
        await drain(response);
        await pause(retryDelay(DEFAULT_RETRY, retried++, response), signal);
        continue;
      }
      return response;
    }
  }

  /** A refusal for a status the protocol does not allow at this step. */
  unexpected(response: IncomingMessage, what: string, codes: string[] = []): OatsError {
    return registryRefusal(
      "protocol",
      `${this.host} answered ${what} with HTTP ${response.statusCode}${codes.length ? ` (${codes.join(", ")})` : ""}`,
      {
        host: this.host,
        status: response.statusCode,
        ...(codes.length ? { registryErrors: codes } : {}),
      },
    );
  }
}
