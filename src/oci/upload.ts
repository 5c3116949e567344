import { closeSync, read } from "node:fs";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import { OatsError, errnoCode } from "../core/index.js";
import { HeldFile, openNamedPath } from "../retention/index.js";
import { checkDigest } from "./blobs.js";
import { drain, isConnectionLost, readBody, registryErrorCodes, registryRefusal, type PiecesBody } from "./http.js";
import type { RegistrySession } from "./session.js";

/**
 * Uploading blobs (distribution spec "pushing blobs"): POST opens a session,
 * then either one PUT ?digest= with the whole body (monolithic) or PATCHes
 * with Content-Range followed by an empty PUT ?digest= (chunked). A
 * connection lost mid-upload is resumed: GET on the session's URL says how
 * many bytes the registry holds and we continue from there; if the session
 * is gone or its state is ambiguous, the upload restarts from a new POST.
 * The registry's answer (Docker-Content-Digest, Location) must name the
 * digest we sent, or the upload is an integrity-mismatch.
 *
 * A source that can read at an offset (`readAt`: a file held by
 * descriptor) goes up through one buffer per request, filled again only
 * once the socket has taken its bytes (http.ts, PiecesBody): a blob of
 * gigabytes leaves no buffer per piece behind for the collector. Any other
 * source goes up as the stream `open` makes.
 */

export interface BlobSource {
  readonly digest: string;
  readonly size: number;
  /** The bytes [start, end) afresh; called again for each retry. */
  open(start: number, end: number): Readable;
  /** Up to `into.length` bytes from `position` into `into`: how many (0 past the end); the same bytes at each call. */
  readAt?(into: Buffer, position: number): Promise<number>;
}

export function bufferSource(bytes: Buffer, digest: string): BlobSource {
  return {
    digest,
    size: bytes.length,
    open: (start, end) => Readable.from([bytes.subarray(start, end)]),
    readAt: async (into, position) => (position >= bytes.length ? 0 : bytes.copy(into, 0, position)),
  };
}

/** A file source; close releases its descriptor once no upload uses it. */
export interface FileBlobSource extends BlobSource {
  close(): Promise<void>;
}

const readFd = promisify(read);

/**
 * The file at `path` as a blob source: opened once, here (no symlink
 * followed, a regular file of `size` bytes, or `invalid-input`), and from
 * then on read only through that descriptor, a retry included. Whatever
 * the path names later (a file renamed over it between two attempts),
 * what goes up is the file that was opened and checked.
 */
export function fileSource(path: string, digest: string, size: number): FileBlobSource {
  let opened: ReturnType<typeof openNamedPath>;
  try {
    opened = openNamedPath(path);
  } catch (error) {
    throw new OatsError("invalid-input", `the blob file ${path} cannot be opened`, { path, errno: errnoCode(error) });
  }
  if (!opened.stats.isFile() || opened.stats.size !== size) {
    closeSync(opened.fd);
    throw new OatsError("invalid-input", `the blob file ${path} is not a regular file of ${size} bytes`, {
      path,
      size,
      actual: opened.stats.isFile() ? opened.stats.size : null,
    });
  }
  const { fd } = opened;
  const held = new HeldFile(fd, path);
  return {
    digest,
    size,
    open: (start, end) => held.stream(start, end),
    readAt: async (into, position) =>
      position >= size ? 0 : (await readFd(fd, into, 0, Math.min(into.length, size - position), position)).bytesRead,
    close: () => held.close(),
  };
}

/** Bytes per piece of a PiecesBody (fewer, larger pieces: fewer objects for the collector). */
const PIECE_BYTES = 1024 * 1024;

/**
 * The bodies of one blob's requests, all through one buffer: a body waits
 * until the one before it has stopped (its exchange ended or failed, so its
 * last read has landed) before it fills the buffer, so a retry never
 * shares it with the attempt it replaces.
 */
class PiecesWriter {
  #buffer: Buffer | null = null;
  #idle: Promise<void> = Promise.resolve();

  constructor(readonly source: BlobSource & Required<Pick<BlobSource, "readAt">>) {}

  /** The bytes [start, end) as a request body. */
  body(start: number, end: number): PiecesBody {
    return { length: end - start, write: (put) => this.#write(start, end, put) };
  }

  async #write(start: number, end: number, put: (piece: Buffer) => Promise<void>): Promise<void> {
    const before = this.#idle;
    let stopped: () => void = () => undefined;
    this.#idle = new Promise((resolve) => {
      stopped = resolve;
    });
    try {
      await before;
      this.#buffer ??= Buffer.allocUnsafe(2 * Math.min(PIECE_BYTES, Math.max(1, this.source.size)));
      // Two halves: the next piece is read into one while the socket takes the other.
      const half = this.#buffer.length / 2;
      const halves = [this.#buffer.subarray(0, half), this.#buffer.subarray(half)] as const;
      const readInto = (which: 0 | 1, at: number): Promise<number> =>
        this.source.readAt(halves[which].subarray(0, Math.min(half, end - at)), at);
      let which: 0 | 1 = 0;
      let reading: Promise<number> | null = start < end ? readInto(0, start) : null;
      for (let at = start; reading !== null; which = which === 0 ? 1 : 0) {
        const got = await reading;
        if (got <= 0) {
          throw new OatsError("integrity-mismatch", `the source of blob ${this.source.digest} ended at ${at} bytes`, {
            expected: this.source.digest,
            expectedSize: this.source.size,
            actualSize: at,
            reason: "source-changed",
          });
        }
        const piece = halves[which].subarray(0, got);
        at += got;
        reading = at < end ? readInto(which === 0 ? 1 : 0, at) : null;
        // Handled now (awaited next turn): a read failing while the socket takes this piece is no stray rejection.
        reading?.catch(() => undefined);
        try {
          await put(piece);
        } catch (error) {
          // The other half's read lands before this body counts as stopped.
          await reading?.catch(() => undefined);
          throw error;
        }
      }
    } finally {
      stopped();
    }
  }
}

/** The bytes [start, end) of `source` as a request body: through the writer's buffer when there is one. */
function bodyOf(
  source: BlobSource,
  writer: PiecesWriter | null,
  start: number,
  end: number,
): () => Readable | PiecesBody {
  return writer === null ? () => source.open(start, end) : () => writer.body(start, end);
}

export interface UploadOptions {
  /** Bytes per PATCH; a blob no larger than this goes up in one PUT (default 32 MiB). */
  readonly chunkSize?: number;
  /** Force chunked uploads even for small blobs. */
  readonly chunked?: boolean;
  /** Connection losses survived per blob (default 5). */
  readonly retries?: number;
}

export interface UploadResult {
  readonly digest: string;
  readonly size: number;
  /** How often a lost connection was resumed from the registry's offset, and how often the upload started over. */
  readonly resumed: number;
  readonly restarted: number;
}

const DEFAULT_CHUNK = 32 * 1024 * 1024;

async function openSession(session: RegistrySession): Promise<URL> {
  const url = session.url("blobs/uploads/");
  const response = await session.request({ method: "POST", url });
  const body = await readBody(response, 65536, () => session.unexpected(response, "POST of an upload"));
  if (response.statusCode !== 202) throw session.unexpected(response, "POST of an upload", registryErrorCodes(body));
  return session.sameOrigin(response.headers.location, url, "an upload session");
}

/** The registry's count of bytes received, from `Range: 0-<last>`; null when the answer is ambiguous (distribution
 * says 0-0 for both 0 and 1 byte). */
function offsetOf(response: IncomingMessage): number | null {
  const match = /^0-(\d+)$/.exec(String(response.headers.range ?? ""));
  if (!match) return null;
  const last = Number(match[1]);
  return last === 0 ? null : last + 1;
}

async function uploadStatus(
  session: RegistrySession,
  location: URL,
): Promise<{ location: URL; offset: number } | null> {
  try {
    const response = await session.request({ method: "GET", url: location });
    await drain(response);
    if (response.statusCode !== 204) return null;
    const offset = offsetOf(response);
    if (offset === null) return null;
    return {
      location: session.sameOrigin(response.headers.location ?? location.href, location, "an upload status"),
      offset,
    };
  } catch (error) {
    if (isConnectionLost(error)) return null;
    throw error;
  }
}

function checkAnswer(session: RegistrySession, response: IncomingMessage, digest: string, location: URL): void {
  const answered = response.headers["docker-content-digest"];
  if (typeof answered === "string" && answered !== digest) {
    throw new OatsError(
      "integrity-mismatch",
      `${session.host} stored the blob as ${answered}, not the ${digest} that was sent`,
      { host: session.host, expected: digest, actual: answered },
    );
  }
  const where = response.headers.location;
  if (where) {
    const last = decodeURIComponent(
      session.sameOrigin(where, location, "the uploaded blob").pathname.split("/").pop() ?? "",
    );
    if (/^[a-z0-9]+:[a-f0-9]+$/.test(last) && last !== digest) {
      throw new OatsError(
        "integrity-mismatch",
        `${session.host} placed the uploaded blob at ${last}, not at the ${digest} that was sent`,
        { host: session.host, expected: digest, actual: last },
      );
    }
  }
}

async function finish(
  session: RegistrySession,
  location: URL,
  source: BlobSource,
  writer: PiecesWriter | null,
  from: number | null,
): Promise<void> {
  const url = new URL(location);
  url.searchParams.set("digest", source.digest);
  const withBody = from !== null && from < source.size;
  const response = await session.request({
    method: "PUT",
    url,
    headers: withBody
      ? { "content-type": "application/octet-stream", "content-length": String(source.size - from) }
      : {},
    ...(withBody ? { body: bodyOf(source, writer, from, source.size) } : {}),
  });
  const body = await readBody(response, 65536, () => session.unexpected(response, "PUT of a blob"));
  if (response.statusCode !== 201) {
    const codes = registryErrorCodes(body);
    if (codes.includes("DIGEST_INVALID") || codes.includes("SIZE_INVALID")) {
      throw new OatsError("integrity-mismatch", `${session.host} received bytes that are not ${source.digest}`, {
        host: session.host,
        expected: source.digest,
        registryErrors: codes,
      });
    }
    throw session.unexpected(response, "PUT of a blob", codes);
  }
  checkAnswer(session, response, source.digest, location);
}

async function patch(
  session: RegistrySession,
  location: URL,
  source: BlobSource,
  writer: PiecesWriter | null,
  start: number,
  end: number,
): Promise<URL> {
  const response = await session.request({
    method: "PATCH",
    url: location,
    headers: {
      "content-type": "application/octet-stream",
      "content-range": `${start}-${end - 1}`,
      "content-length": String(end - start),
    },
    body: bodyOf(source, writer, start, end),
  });
  const body = await readBody(response, 65536, () => session.unexpected(response, "PATCH of a blob"));
  if (response.statusCode !== 202) throw session.unexpected(response, "PATCH of a blob", registryErrorCodes(body));
  const offset = offsetOf(response);
  if (offset !== null && offset !== end) {
    throw registryRefusal(
      "protocol",
      `${session.host} holds ${offset} bytes of the upload after a PATCH up to ${end}`,
      { host: session.host, expected: end, actual: offset },
    );
  }
  return session.sameOrigin(response.headers.location ?? location.href, location, "an upload session");
}

export async function putBlob(
  session: RegistrySession,
  source: BlobSource,
  options: UploadOptions = {},
): Promise<UploadResult> {
  checkDigest(source.digest);
  if (!Number.isSafeInteger(source.size) || source.size < 0)
    throw new OatsError("invalid-input", "a blob size is a non-negative integer", { size: source.size });
  const chunkSize = Math.max(1, options.chunkSize ?? DEFAULT_CHUNK);
  const chunked = options.chunked === true || source.size > chunkSize;
  let retries = options.retries ?? 5;
  const readAt = source.readAt;
  const writer = readAt === undefined ? null : new PiecesWriter({ ...source, readAt: readAt.bind(source) });
  let resumed = 0;
  let restarted = 0;
  let location: URL | null = null;
  let offset = 0;
  // Set after a resume until the next PATCH or PUT lands: a registry that reported an offset and then refuses to
  // continue from it gets one clean restart.
  let resuming = false;
  for (;;) {
    try {
      location ??= await openSession(session);
      if (!chunked) {
        await finish(session, location, source, writer, 0);
      } else {
        while (offset < source.size) {
          const end = Math.min(source.size, offset + chunkSize);
          location = await patch(session, location, source, writer, offset, end);
          offset = end;
          resuming = false;
        }
        await finish(session, location, source, writer, null);
      }
      return { digest: source.digest, size: source.size, resumed, restarted };
    } catch (error) {
      const refusedResume =
        resuming &&
        error instanceof OatsError &&
        error.code === "registry-refused" &&
        error.details["reason"] === "protocol";
      resuming = false;
      if (!(isConnectionLost(error) || refusedResume) || retries-- <= 0) throw error;
      const status: { location: URL; offset: number } | null =
        chunked && location && !refusedResume ? await uploadStatus(session, location) : null;
      if (status && status.offset <= source.size) {
        location = status.location;
        offset = status.offset;
        resumed++;
        resuming = true;
      } else {
        if (location) await cancel(session, location);
        location = null;
        offset = 0;
        restarted++;
      }
    }
  }
}

/** Abandon an upload session; failures are ignored (the registry expires it anyway). */
async function cancel(session: RegistrySession, location: URL): Promise<void> {
  try {
    await drain(await session.request({ method: "DELETE", url: location }));
  } catch {
    // best effort
  }
}

/** Ask the registry to link a blob it holds in `from` into this repository; false when it did not (then upload it). */
export async function mountBlob(session: RegistrySession, digest: string, from: string): Promise<boolean> {
  checkDigest(digest);
  const url = session.url("blobs/uploads/");
  url.searchParams.set("mount", digest);
  url.searchParams.set("from", from);
  const response = await session.request({ method: "POST", url });
  const body = await readBody(response, 65536, () => session.unexpected(response, "a blob mount"));
  if (response.statusCode === 201) {
    checkAnswer(session, response, digest, url);
    return true;
  }
  if (response.statusCode === 202) {
    await cancel(session, session.sameOrigin(response.headers.location, url, "an upload session"));
    return false;
  }
  throw session.unexpected(response, "a blob mount", registryErrorCodes(body));
}
