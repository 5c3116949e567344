import { createHash } from "node:crypto";
import { Transform, type Readable, type TransformCallback } from "node:stream";
import { OatsError } from "../core/index.js";
import { abortedError, classifyNetworkError, drain, eitherSignal, readBody, registryErrorCodes } from "./http.js";
import { digestSchema } from "./reference.js";
import type { RegistrySession } from "./session.js";

/**
 * Reading blobs. A blob is only ever handed on through a stream that hashes
 * what passes and fails at its end unless the bytes are exactly the digest
 * asked for (and the size the descriptor said): a consumer that lets the
 * stream finish without an error has the right bytes, and one that stops
 * early never published anything (the caller stages, then publishes).
 */

export function sha256Digest(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

export function checkDigest(digest: string): void {
  if (!digestSchema.safeParse(digest).success)
    throw new OatsError("invalid-input", "a blob digest must be sha256:<64 lowercase hex>", {
      digest: String(digest).slice(0, 100),
    });
}

export interface BlobReadOptions {
  /** The size the descriptor names; a different length is an integrity-mismatch. */
  readonly size?: number;
  /** Refuse a blob larger than this many bytes (default 64 GiB). */
  readonly maxBytes?: number;
  /**
   * Abandons the request at once, while it waits for its answer or while the blob streams: the stream then fails
   * with the signal's error (http.ts, TransportOptions.signal). A consumer that refuses what it read aborts it, so
   * the connection is closed then and there.
   */
  readonly signal?: AbortSignal;
}

const DEFAULT_MAX_BLOB = 64 * 1024 ** 3;

export async function headBlob(
  session: RegistrySession,
  digest: string,
  options: { readonly signal?: AbortSignal } = {},
): Promise<{ size: number } | null> {
  checkDigest(digest);
  const response = await session.request({
    method: "HEAD",
    url: session.url(`blobs/${digest}`),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  await drain(response);
  if (response.statusCode === 404) return null;
  if (response.statusCode !== 200) throw session.unexpected(response, `HEAD of blob ${digest}`);
  const answered = response.headers["docker-content-digest"];
  if (typeof answered === "string" && answered !== digest) {
    throw new OatsError("integrity-mismatch", `${session.host} describes blob ${digest} under another digest`, {
      expected: digest,
      actual: answered,
      host: session.host,
    });
  }
  const size = Number(response.headers["content-length"]);
  return { size: Number.isSafeInteger(size) && size >= 0 ? size : -1 };
}

class VerifyingStream extends Transform {
  readonly #hash = createHash("sha256");
  #seen = 0;
  constructor(
    readonly digest: string,
    readonly host: string,
    readonly limit: number,
    readonly size: number | undefined,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#seen += chunk.length;
    if (this.#seen > this.limit || (this.size !== undefined && this.#seen > this.size)) {
      callback(
        this.size !== undefined && this.#seen > this.size
          ? new OatsError(
              "integrity-mismatch",
              `blob ${this.digest} from ${this.host} is longer than its descriptor's ${this.size} bytes`,
              { expected: this.digest, expectedSize: this.size, host: this.host, reason: "size" },
            )
          : new OatsError(
              "invalid-artifact",
              `blob ${this.digest} from ${this.host} is larger than the limit of ${this.limit} bytes`,
              { digest: this.digest, limit: this.limit, host: this.host, reason: "too-large" },
            ),
      );
      return;
    }
    this.#hash.update(chunk);
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    const actual = `sha256:${this.#hash.digest("hex")}`;
    if (this.size !== undefined && this.#seen !== this.size) {
      callback(
        new OatsError(
          "integrity-mismatch",
          `blob ${this.digest} from ${this.host} has ${this.#seen} bytes, its descriptor says ${this.size}`,
          { expected: this.digest, expectedSize: this.size, actualSize: this.#seen, host: this.host, reason: "size" },
        ),
      );
    } else if (actual !== this.digest) {
      callback(
        new OatsError("integrity-mismatch", `blob ${this.digest} from ${this.host} hashes to ${actual}`, {
          expected: this.digest,
          actual,
          host: this.host,
        }),
      );
    } else callback();
  }
}

/** The blob's bytes as a stream that errors (integrity-mismatch, invalid-artifact) unless they are exactly `digest`. */
export async function getBlob(
  session: RegistrySession,
  digest: string,
  options: BlobReadOptions = {},
): Promise<Readable> {
  checkDigest(digest);
  const limit = options.maxBytes ?? DEFAULT_MAX_BLOB;
  const url = session.url(`blobs/${digest}`);
  const response = await session.request({ method: "GET", url, ...(options.signal ? { signal: options.signal } : {}) });
  if (response.statusCode === 404) {
    const codes = registryErrorCodes(
      await readBody(
        response,
        65536,
        () => new OatsError("blob-not-found", `${session.host} does not serve blob ${digest}`, { digest }),
      ),
    );
    throw new OatsError(
      "blob-not-found",
      `${session.host} does not serve blob ${digest} in ${session.reference.repository}`,
      { digest, host: session.host, repository: session.reference.repository, registryErrors: codes },
    );
  }
  if (response.statusCode !== 200) {
    await drain(response);
    throw session.unexpected(response, `GET of blob ${digest}`);
  }
  const declared = Number(response.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) {
    response.destroy();
    throw new OatsError(
      "invalid-artifact",
      `blob ${digest} from ${session.host} is larger than the limit of ${limit} bytes`,
      { digest, limit, declared, host: session.host, reason: "too-large" },
    );
  }
  const verifier = new VerifyingStream(digest, session.host, limit, options.size);
  // An aborted signal is why the body stopped: its error, not a lost connection.
  const signal = eitherSignal(session.signal, options.signal);
  const cut = (error: unknown) =>
    verifier.destroy(signal?.aborted ? abortedError(signal) : classifyNetworkError(error, url));
  response.on("error", cut);
  // A body cut short ends without 'end' on some paths; make it a typed failure, never a short success.
  response.on("aborted", () => cut(Object.assign(new Error("aborted"), { code: "ECONNRESET" })));
  // A consumer that stops early (destroys the stream) ends the exchange too: the socket is closed now, not left
  // half-read until the idle timeout.
  verifier.on("close", () => {
    if (!response.complete) response.destroy();
  });
  response.pipe(verifier);
  return verifier;
}

/** A small blob (a config, a record) read whole and verified. */
export async function getBlobBytes(
  session: RegistrySession,
  digest: string,
  options: BlobReadOptions & { maxBytes: number },
): Promise<Buffer> {
  const stream = await getBlob(session, digest, options);
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
