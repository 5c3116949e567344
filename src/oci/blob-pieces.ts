import { createHash } from "node:crypto";
import net from "node:net";
import tls from "node:tls";
import { OatsError } from "../core/index.js";
import { checkDigest, getBlob, type BlobReadOptions } from "./blobs.js";
import { abortedError, checkOrigin, classifyNetworkError, eitherSignal } from "./http.js";
import type { RegistrySession } from "./session.js";

/**
 * Reading a blob a piece at a time through one reused buffer. Node's HTTP
 * client hands a body over as a fresh buffer per socket read, and copies it
 * once more in its parser: a blob of gigabytes read back leaves tens of
 * megabytes of dead buffers for the collector at any moment. Here the blob
 * GET is written on a socket of its own whose reads all land in one buffer
 * (the socket's `onread`), and each piece is hashed and handed on before the
 * next read. Only the plain answer is taken this way: 200 with a
 * Content-Length, no transfer coding, of the size asked for and within the
 * limit. Anything else (a challenge, a redirect, an error, a chunked body)
 * closes that socket and the blob is read again through the session's
 * ordinary stream (blobs.ts, getBlob), with its auth, redirect, retry and
 * refusals. Either way the bytes handed on are held to the digest: a blob
 * that does not hash to it fails with `integrity-mismatch` after its last
 * piece (a consumer that stages its copy publishes nothing until this
 * returns).
 */

const READ_BYTES = 256 * 1024;
const HEAD_LIMIT = 64 * 1024;

export interface BlobPiecesOptions extends BlobReadOptions {
  /** Hand over at most this many bytes (the rest is not read); default all of them. */
  readonly limit?: number;
}

interface Head {
  readonly status: number;
  readonly headers: Map<string, string>;
}

function parseHead(bytes: Buffer): Head | null {
  const lines = bytes.toString("latin1").split("\r\n");
  const status = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0] ?? "");
  if (!status) return null;
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0) return null;
    const name = line.slice(0, colon).trim().toLowerCase();
    // A repeated header the fast path relies on is ambiguous: leave it to the ordinary client.
    if (headers.has(name)) headers.set(name, "\u0000repeated");
    else headers.set(name, line.slice(colon + 1).trim());
  }
  return { status: Number(status[1]), headers };
}

/** The body's length when the answer is the plain one this path takes, else null. */
function plainLength(head: Head, options: BlobPiecesOptions, maxBytes: number): number | null {
  if (head.status !== 200 || head.headers.has("transfer-encoding")) return null;
  const declared = head.headers.get("content-length") ?? "";
  if (!/^\d{1,16}$/.test(declared)) return null;
  const length = Number(declared);
  if (length > maxBytes || (options.size !== undefined && length !== options.size)) return null;
  return length;
}

/** What a plain answer gave so far: more to read, the bytes handed over (done), or not plain (read it otherwise). */
type Taken = "more" | "not-plain" | { handed: number };

/**
 * The answer to one plain GET, fed the socket's reads in order: its head
 * (copied, it is small) and then its body, read in place, hashed and handed
 * on up to `limit`. At the body's end the hash must be the digest.
 */
class PlainAnswer {
  readonly #hash = createHash("sha256");
  #head: Buffer | null = Buffer.alloc(0);
  #length = 0;
  #seen = 0;
  #handed = 0;

  constructor(
    readonly digest: string,
    readonly host: string,
    readonly options: BlobPiecesOptions,
    readonly consume: (piece: Buffer) => void,
  ) {}

  take(chunk: Buffer): Taken {
    if (this.#head === null) return this.#body(chunk);
    this.#head = Buffer.concat([this.#head, chunk]);
    const end = this.#head.indexOf("\r\n\r\n");
    if (end < 0) return this.#head.length > HEAD_LIMIT ? "not-plain" : "more";
    const parsed = parseHead(this.#head.subarray(0, end));
    const plain = parsed === null ? null : plainLength(parsed, this.options, this.options.maxBytes ?? 64 * 1024 ** 3);
    if (plain === null) return "not-plain";
    const rest = this.#head.subarray(end + 4);
    this.#head = null;
    this.#length = plain;
    // An empty blob is complete at its head.
    return rest.length > 0 || plain === 0 ? this.#body(rest) : "more";
  }

  #body(piece: Buffer): Taken {
    const limit = this.options.limit ?? Number.MAX_SAFE_INTEGER;
    const part = piece.subarray(0, this.#length - this.#seen);
    this.#seen += part.length;
    this.#hash.update(part);
    const given = part.subarray(0, Math.max(0, limit - this.#handed));
    if (given.length > 0) {
      this.#handed += given.length;
      this.consume(given);
    }
    if (this.#seen === this.#length) {
      const actual = `sha256:${this.#hash.digest("hex")}`;
      if (actual !== this.digest)
        throw new OatsError("integrity-mismatch", `blob ${this.digest} from ${this.host} hashes to ${actual}`, {
          expected: this.digest,
          actual,
          host: this.host,
        });
      return { handed: this.#handed };
    }
    return this.#handed >= limit ? { handed: this.#handed } : "more";
  }
}

/** A socket to the URL's host whose reads all land in `onread`'s buffer: TLS for https (never relaxed). */
function connect(url: URL, onread: { buffer: Buffer; callback: (bytes: number, buffer: Uint8Array) => boolean }) {
  const secure = url.protocol === "https:";
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = Number(url.port) || (secure ? 443 : 80);
  const socket = secure
    ? tls.connect({
        host,
        port,
        // Node's default: system CAs plus its bundle; never relaxed here.
        rejectUnauthorized: true,
        ...(net.isIP(host) ? {} : { servername: host }),
        // Taken by tls.connect as by net.connect; @types/node lists it only for the latter.
        ...({ onread } as object),
      })
    : net.connect({ host, port, onread });
  return { socket, connected: secure ? "secureConnect" : "connect" };
}

/**
 * One GET of the blob on its own socket, its body read into one buffer.
 * Resolves with the bytes handed to `consume`, or null when the answer is
 * not the plain one (nothing was handed over then).
 */
function readPlain(
  session: RegistrySession,
  digest: string,
  options: BlobPiecesOptions,
  consume: (piece: Buffer) => void,
): Promise<number | null> {
  const url = session.url(`blobs/${digest}`);
  checkOrigin(url);
  const signal = eitherSignal(session.signal, options.signal);
  if (signal?.aborted) return Promise.reject(abortedError(signal));
  const authorization = session.authorizationFor(url);
  const request = Buffer.from(
    `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nUser-Agent: oats-retention\r\n` +
      `Accept: */*\r\nConnection: close\r\n${authorization ? `Authorization: ${authorization}\r\n` : ""}\r\n`,
    "latin1",
  );
  const answer = new PlainAnswer(digest, session.host, options, consume);
  const lost = (why: string, code: string) => classifyNetworkError(Object.assign(new Error(why), { code }), url);
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (error: unknown, value: number | null = null): void => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      socket.destroy();
      if (error) reject(error);
      else resolve(value);
    };
    const onAbort = (): void => settle(abortedError(signal!));
    const buffer = Buffer.allocUnsafe(READ_BYTES);
    const callback = (bytes: number): boolean => {
      if (settled) return false;
      try {
        const taken = answer.take(buffer.subarray(0, bytes));
        if (taken === "not-plain") settle(null);
        else if (taken !== "more") settle(null, taken.handed);
      } catch (error) {
        settle(error);
      }
      return !settled;
    };
    const { socket, connected } = connect(url, { buffer, callback });
    signal?.addEventListener("abort", onAbort, { once: true });
    socket.once(connected, () => socket.write(request));
    socket.setTimeout(session.idleTimeoutMs, () => settle(lost("idle timeout", "ETIMEDOUT")));
    socket.on("error", (error) => settle(signal?.aborted ? abortedError(signal) : classifyNetworkError(error, url)));
    socket.once("close", () => settle(lost("socket hang up", "ECONNRESET")));
  });
}

/**
 * The blob's bytes handed to `consume` a piece at a time (a piece is valid
 * only during its call; at most `limit` bytes); returns how many. Fails
 * with `integrity-mismatch` unless the whole blob is exactly `digest` (and
 * `size`, when given), with the refusals of getBlob otherwise.
 */
export async function readBlobPieces(
  session: RegistrySession,
  digest: string,
  options: BlobPiecesOptions,
  consume: (piece: Buffer) => void,
): Promise<number> {
  checkDigest(digest);
  const plain = await readPlain(session, digest, options, consume);
  if (plain !== null) return plain;
  const limit = options.limit ?? Number.MAX_SAFE_INTEGER;
  const stream = await getBlob(session, digest, options);
  let handed = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      const given = chunk.subarray(0, limit - handed);
      handed += given.length;
      if (given.length > 0) consume(given);
      if (handed >= limit) break;
    }
  } finally {
    stream.destroy();
  }
  return handed;
}
