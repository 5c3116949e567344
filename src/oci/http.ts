import http from "node:http";
import https from "node:https";
import { Readable } from "node:stream";
import { OatsError, errnoCode, interruptedError } from "../core/index.js";
import { isLoopbackHost } from "./reference.js";

/**
 * One HTTP exchange with a registry, nothing more: no auth, no redirects.
 * The trust rules that hold for every hop live here so no caller can skip
 * them: HTTPS with the system CA store, plain HTTP only to a loopback host,
 * and every network failure turned into a typed refusal that names the host
 * and never a header (headers may carry credentials).
 */

export type Method = "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE";

export interface Exchange {
  readonly method: Method;
  readonly url: URL;
  readonly headers?: Record<string, string>;
  /** Made afresh for each send, so a request can be repeated after an auth challenge. */
  readonly body?: () => Buffer | Readable | PiecesBody;
  /** Sending it again changes nothing (GET and HEAD always are; a manifest PUT says so): a transient answer is then
   * asked again. */
  readonly repeatable?: boolean;
  /** Abandons this exchange (with the session's signal, if any): see TransportOptions.signal. */
  readonly signal?: AbortSignal;
}

/**
 * A body of a known length written a piece at a time: `write` hands each
 * piece to `put` and waits for it before making the next, so one buffer can
 * be filled again for every piece (put resolves once the socket is done
 * with the piece's bytes). A large upload then leaves no garbage buffer per
 * piece behind for the collector. `put` rejects once the exchange has
 * failed or ended; `write` then stops.
 */
export interface PiecesBody {
  readonly length: number;
  write(put: (piece: Buffer) => Promise<void>): Promise<void>;
}

function isPiecesBody(body: unknown): body is PiecesBody {
  return typeof body === "object" && body !== null && !Buffer.isBuffer(body) && !(body instanceof Readable);
}

/** A failure of the body's own source (not of the network), as the caller's typed refusal. */
function sourceFailure(error: Error): OatsError {
  return error instanceof OatsError
    ? error
    : new OatsError("internal-error", `reading the upload source failed: ${error.message}`, {
        step: "upload-source",
        errno: errnoCode(error),
      });
}

/** Write a PiecesBody into `request`, then end it; `failed` is told when the source (not the socket) fails. */
function writePieces(request: http.ClientRequest, body: PiecesBody, failed: (error: Error) => void): void {
  const over = new Error("the exchange is over");
  let ended = false;
  // The one write in flight, to be failed when the exchange ends under it.
  let pending: ((error: Error | null | undefined) => void) | null = null;
  const end = (): void => {
    ended = true;
    pending?.(over);
  };
  request.once("close", end);
  request.once("error", end);
  const put = (piece: Buffer): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      if (ended) {
        reject(over);
        return;
      }
      const settle = (error: Error | null | undefined): void => {
        if (pending !== settle) return;
        pending = null;
        if (!error) {
          resolve();
          return;
        }
        // A failed write is the exchange's failure (classified by its 'error'), never the source's.
        if (error !== over) request.destroy(error);
        reject(over);
      };
      pending = settle;
      request.write(piece, settle);
    });
  body.write(put).then(
    () => {
      if (!ended) request.end();
    },
    (error: Error) => {
      if (!ended && error !== over) failed(error);
    },
  );
}

export interface TransportOptions {
  /** Milliseconds without any socket activity before the exchange is abandoned. */
  readonly idleTimeoutMs?: number;
  /**
   * Abandons every exchange at once when aborted: before its answer, the exchange fails; after it, the response is
   * destroyed, so a body being read fails and the socket is closed rather than left to the idle timeout. The error
   * is the signal's reason when that is an OatsError (a caller that stops reading says why), else the interruption
   * (Ctrl-C: `internal-error`, reason `interrupted`).
   */
  readonly signal?: AbortSignal;
}

/** The error an aborted exchange fails with (see TransportOptions.signal). */
export function abortedError(signal: AbortSignal): OatsError {
  return signal.reason instanceof OatsError ? signal.reason : interruptedError();
}

/** The session's signal and the exchange's own, as one (either aborts). */
export function eitherSignal(...signals: (AbortSignal | undefined)[]): AbortSignal | undefined {
  const present = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  return present.length <= 1 ? present[0] : AbortSignal.any(present);
}

const TLS_PREFIXES = ["ERR_TLS_", "ERR_SSL_", "CERT_", "UNABLE_TO_", "ERR_OSSL_"];
const TLS_NAMES = ["EPROTO", "DEPTH_ZERO_SELF_SIGNED_CERT", "SELF_SIGNED_CERT_IN_CHAIN", "HOSTNAME_MISMATCH"];
const TLS_CODES = new RegExp(`^(${[...TLS_PREFIXES, ...TLS_NAMES.map((name) => `${name}$`)].join("|")})`);
const LOST_CODES = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "ERR_STREAM_PREMATURE_CLOSE", "UND_ERR_SOCKET"]);

export function registryRefusal(
  reason: string,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): OatsError {
  return new OatsError(
    "registry-refused",
    message,
    { reason, ...details },
    cause === undefined ? undefined : { cause: stripCause(cause) },
  );
}

/** A cause without request objects: a ClientRequest error may hold the headers we sent. */
function stripCause(cause: unknown): unknown {
  if (!(cause instanceof Error)) return undefined;
  const plain = new Error(cause.message);
  const code = errnoCode(cause);
  if (code) (plain as Error & { code?: string }).code = code;
  return plain;
}

/** The origin rule: https anywhere, http only to loopback. */
export function checkOrigin(url: URL): void {
  if (url.protocol === "https:") return;
  if (url.protocol === "http:" && isLoopbackHost(url.hostname)) return;
  throw registryRefusal(
    "insecure-remote",
    `refusing plain HTTP to ${url.host}: only loopback registries ` +
      `(127.0.0.0/8, ::1, localhost) may be used without TLS`,
    { host: url.host, protocol: url.protocol.replace(/:$/, "") },
  );
}

/** True when the failure is a connection lost mid-exchange (a resumable upload may retry). */
export function isConnectionLost(error: unknown): boolean {
  return (
    error instanceof OatsError && error.code === "registry-refused" && error.details["reason"] === "connection-lost"
  );
}

export function classifyNetworkError(error: unknown, url: URL): OatsError {
  if (error instanceof OatsError) return error;
  const code = errnoCode(error) ?? "";
  const host = url.host;
  if (TLS_CODES.test(code) || /certificate|ssl|tls/i.test(error instanceof Error ? error.message : "")) {
    return registryRefusal(
      "tls",
      `the TLS connection to ${host} failed (${code || "handshake"}); the ` +
        `registry's certificate must verify against the system CA store`,
      { host, errno: code },
      error,
    );
  }
  if (LOST_CODES.has(code) || /socket hang up|aborted/i.test(error instanceof Error ? error.message : "")) {
    return registryRefusal(
      "connection-lost",
      `the connection to ${host} was lost mid-exchange`,
      { host, errno: code || "ECONNRESET" },
      error,
    );
  }
  return registryRefusal(
    "unreachable",
    `the registry at ${host} cannot be reached (${code || "network error"})`,
    { host, errno: code },
    error,
  );
}

const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: 8 }),
  https: new https.Agent({ keepAlive: true, maxSockets: 8 }),
};

/** Send one exchange and resolve with the response head; the body is the caller's to read or drain. */
export function send(exchange: Exchange, options: TransportOptions = {}): Promise<http.IncomingMessage> {
  const { url } = exchange;
  checkOrigin(url);
  const signal = eitherSignal(options.signal, exchange.signal);
  if (signal?.aborted) return Promise.reject(abortedError(signal));
  const secure = url.protocol === "https:";
  const body = exchange.body?.();
  const headers: Record<string, string> = { "user-agent": "oats-retention", ...exchange.headers };
  if (Buffer.isBuffer(body) || isPiecesBody(body)) headers["content-length"] = String(body.length);
  else if (
    body === undefined &&
    (exchange.method === "PUT" || exchange.method === "POST" || exchange.method === "PATCH")
  )
    headers["content-length"] = "0";
  return new Promise((resolve, reject) => {
    let settled = false;
    let answer: http.IncomingMessage | null = null;
    const fail = (error: unknown): void => {
      if (settled) return;
      settled = true;
      if (body instanceof Readable) body.destroy();
      reject(classifyNetworkError(error, url));
    };
    const request = (secure ? https : http).request(
      url,
      {
        method: exchange.method,
        headers,
        agent: secure ? agents.https : agents.http,
        // Node's default: system CAs plus its bundle; never relaxed here.
        rejectUnauthorized: true,
      },
      (response) => {
        if (settled) {
          response.resume();
          return;
        }
        settled = true;
        answer = response;
        resolve(response);
      },
    );
    if (signal) {
      const onAbort = (): void => {
        const error = abortedError(signal);
        // A body being read fails with the abort's error; the socket is closed, never returned to the pool.
        answer?.destroy(error);
        request.destroy(error);
        fail(error);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      request.once("close", () => signal.removeEventListener("abort", onAbort));
    }
    request.setTimeout(options.idleTimeoutMs ?? 60_000, () =>
      request.destroy(Object.assign(new Error("idle timeout"), { code: "ETIMEDOUT" })),
    );
    request.on("error", fail);
    const sourceFailed = (error: Error): void => {
      request.destroy();
      if (!settled) {
        settled = true;
        reject(sourceFailure(error));
      }
    };
    if (body instanceof Readable) {
      body.on("error", sourceFailed);
      body.pipe(request);
    } else if (isPiecesBody(body)) {
      writePieces(request, body, sourceFailed);
    } else {
      request.end(body);
    }
  });
}

/** Read a whole response body of at most `limit` bytes; a longer one is refused as `tooLarge()` says. */
export async function readBody(
  response: http.IncomingMessage,
  limit: number,
  tooLarge: () => OatsError,
): Promise<Buffer> {
  const declared = Number(response.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) {
    response.destroy();
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of response) {
      total += (chunk as Buffer).length;
      if (total > limit) {
        response.destroy();
        throw tooLarge();
      }
      chunks.push(chunk as Buffer);
    }
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw classifyNetworkError(
      error,
      new URL(`http://${(response as unknown as { req?: { host?: string } }).req?.host ?? "registry"}`),
    );
  }
  return Buffer.concat(chunks);
}

/** Discard a body we do not need, so the socket returns to the pool. */
export function drain(response: http.IncomingMessage): Promise<void> {
  return new Promise((resolve) => {
    response
      .on("end", resolve)
      .on("error", () => resolve())
      .on("close", resolve);
    response.resume();
  });
}

/**
 * The registry's error codes from a distribution-spec error body, only as
 * bare codes: a hostile registry could echo our request (credentials
 * included) into `message` or `detail`, so neither is ever repeated.
 */
export function registryErrorCodes(body: Buffer): string[] {
  try {
    const parsed = JSON.parse(body.toString("utf8")) as { errors?: Array<{ code?: unknown }> };
    if (!Array.isArray(parsed.errors)) return [];
    return parsed.errors
      .map((entry) => entry?.code)
      .filter((code): code is string => typeof code === "string" && /^[A-Z_]{1,64}$/.test(code))
      .slice(0, 8);
  } catch {
    return [];
  }
}
