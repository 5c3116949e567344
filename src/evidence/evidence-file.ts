import { Readable } from "node:stream";
import { type ErrorCode, OatsError, bytesDigest, bytesDigester } from "../core/index.js";
import { read } from "node:fs";
import { promisify } from "node:util";
import { HeldFile, openNamedPath, type ReadFailure } from "../retention/index.js";

/**
 * A run's files on their way to a far side and back, without holding a log
 * in memory (docs/design/evidence.md, "Streaming and its bounds"). A file
 * going out is an EvidenceFile: its size and oats.bytes.v1 digest, known
 * before it is sent, and its bytes on demand, read through a bounded buffer
 * from a descriptor opened once (O_NOFOLLOW, O_NONBLOCK, a regular file) and
 * never by its name again. A file coming back is a FarSideFile: the size the
 * far side states and a stream of its bytes, which the reader hashes as they
 * pass and holds to the digest it already knows.
 */

/**
 * What a transport's `readBack` hands over whole, per file: the far side's
 * files as buffers (readDelivered, callers that look at a run). Push and
 * pull stream through `openBack` and are not bound by it; a file past it is
 * refused with reason `too-large`.
 */
export const READ_BACK_LIMIT = 1024 * 1024 * 1024;

/** One file of a run as handed to a transport's put. */
export interface EvidenceFile {
  readonly size: number;
  /** oats.bytes.v1 (`sha256-<hex>`), computed before the file is handed over. */
  readonly digest: string;
  /** Every byte, a piece at a time through one reused buffer (a piece is valid only during its call). */
  pieces(consume: (piece: Buffer) => void): Promise<void>;
  /** The bytes [start, end) as a stream, afresh at each call (an upload resumes from an offset). */
  open(start: number, end: number): Readable;
  /** Up to `into.length` bytes from `position` into `into`: how many (0 past the end). An upload that has it sends
   * the file through one reused buffer (oci/upload.ts). */
  readAt?(into: Buffer, position: number): Promise<number>;
}

/** One file a far side holds for a run, as its read-back lists it. */
export interface FarSideFile {
  /** The size the far side states (a share's fstat, a registry's descriptor). */
  readonly size: number;
  /** Its bytes; a transport that can check them on the way (a registry's blob digest) fails the stream otherwise. */
  stream(): Promise<Readable>;
  /**
   * A local far side's bytes (a share's file held by descriptor) without a stream: at most `limit` of them, a piece
   * at a time through one reused buffer (a piece is valid only during its call); returns how many were read. Reading
   * so leaves no garbage buffer behind for the collector, which is what keeps a push's peak RSS flat.
   */
  pieces?(limit: number, consume: (piece: Buffer) => void): Promise<number>;
}

/** What a far side holds for one run, open for reading; close releases what the transport holds open. */
export interface FarSideRun {
  readonly files: ReadonlyMap<string, FarSideFile>;
  close(): Promise<void>;
}

/** Bytes in memory as an EvidenceFile (small files, and callers that hand a transport buffers). */
export function bufferFile(bytes: Buffer): EvidenceFile {
  return {
    size: bytes.length,
    digest: bytesDigest(bytes),
    pieces: async (consume) => consume(bytes),
    open: (start, end) => Readable.from([bytes.subarray(start, end)]),
    readAt: async (into, position) => (position >= bytes.length ? 0 : bytes.copy(into, 0, position)),
  };
}

export function asEvidenceFile(file: Buffer | EvidenceFile): EvidenceFile {
  return Buffer.isBuffer(file) ? bufferFile(file) : file;
}

/** Few, large pieces: every piece costs a few small objects, and a log of gigabytes in 256 KiB pieces made enough of
 * them to grow the young generation of a push to a registry by 16 MiB (docs/design/performance.md, row 32b). */
const PIECE_BYTES = 1024 * 1024;
const readAt = promisify(read);

/**
 * The first `limit` bytes of an open file, from offset 0, handed to
 * `consume` a piece at a time through one buffer reused for every piece (a
 * piece is valid only during its call); returns how many were read, fewer
 * when the file is shorter. Each read is asynchronous, so a log of
 * gigabytes never holds the event loop (a lock being kept fresh, a signal),
 * and no piece is left behind as garbage.
 */
export async function readPieces(fd: number, limit: number, consume: (piece: Buffer) => void): Promise<number> {
  const buffer = Buffer.allocUnsafe(PIECE_BYTES);
  let done = 0;
  while (done < limit) {
    const { bytesRead } = await readAt(fd, buffer, 0, Math.min(buffer.length, limit - done), done);
    if (bytesRead === 0) break;
    consume(buffer.subarray(0, bytesRead));
    done += bytesRead;
  }
  return done;
}

/** A regular file held open by descriptor, hashed once through a bounded buffer; close releases it. */
export interface HeldEvidenceFile extends EvidenceFile {
  close(): Promise<void>;
}

/**
 * Open `path` for sending: never through a symlink, only a regular file,
 * read through the descriptor alone, hashed once here. `refuse` turns a
 * failure into the caller's typed refusal; a file that shrinks while it is
 * read is `changed`. `pieces` reads the file again and fails (`changed`)
 * when it no longer yields `size` bytes; the transport that copies it
 * hashes what it copies and holds it to `digest`.
 */
export async function holdEvidenceFile(
  path: string,
  refuse: (failure: ReadFailure, details: Record<string, unknown>) => OatsError,
): Promise<HeldEvidenceFile> {
  let opened: ReturnType<typeof openNamedPath>;
  try {
    opened = openNamedPath(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw refuse(code === "ENOENT" ? "missing" : code === "ELOOP" ? "symlink" : "unreadable", { path, errno: code });
  }
  const held = new HeldFile(opened.fd, path);
  try {
    if (!opened.stats.isFile()) throw refuse("not-a-file", { path });
    const size = opened.stats.size;
    const pieces = async (consume: (piece: Buffer) => void): Promise<void> => {
      if ((await readPieces(opened.fd, size, consume)) !== size) throw refuse("changed", { path });
    };
    const digester = bytesDigester();
    await pieces((piece) => digester.update(piece));
    return {
      size,
      digest: digester.digest(),
      pieces,
      open: (start, end) => held.stream(start, end),
      // Never past the size that was hashed: a file grown since reads as the one that was queued, or short.
      readAt: async (into, position) =>
        position >= size
          ? 0
          : (await readAt(opened.fd, into, 0, Math.min(into.length, size - position), position)).bytesRead,
      close: () => held.close(),
    };
  } catch (error) {
    await held.close();
    throw error;
  }
}

/** What streaming a far-side file gave: its digest and length, or where it stopped being what was expected. */
export interface StreamedDigest {
  readonly digest: string;
  readonly bytes: number;
}

/**
 * Hash a far-side file as it streams, through the transport's bounded
 * chunks; `consume` sees every chunk too (a copy being written). When
 * `expectedBytes` is given, a stream that runs past it stops there: what
 * follows cannot make it the expected file, and a far side that never ends
 * is not read to its end.
 */
export async function digestFarSideFile(
  file: FarSideFile,
  expectedBytes: number | null,
  consume: (chunk: Buffer) => void = () => undefined,
): Promise<StreamedDigest> {
  const digester = bytesDigester();
  let bytes = 0;
  if (file.pieces !== undefined) {
    bytes = await file.pieces(expectedBytes === null ? Number.MAX_SAFE_INTEGER : expectedBytes + 1, (piece) => {
      if (expectedBytes !== null && bytes + piece.length > expectedBytes) {
        bytes += piece.length;
        return;
      }
      bytes += piece.length;
      digester.update(piece);
      consume(piece);
    });
    return { digest: digester.digest(), bytes };
  }
  const stream = await file.stream();
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (expectedBytes !== null && bytes > expectedBytes) break;
      digester.update(chunk);
      consume(chunk);
    }
  } finally {
    stream.destroy();
  }
  return { digest: digester.digest(), bytes };
}

/** A far-side file read whole, for the callers that want buffers; longer than `limit` is refused. */
export async function readFarSideFile(
  file: FarSideFile,
  limit: number,
  tooLarge: (size: number) => OatsError,
): Promise<Buffer> {
  if (file.size > limit) throw tooLarge(file.size);
  const chunks: Buffer[] = [];
  let bytes = 0;
  const stream = await file.stream();
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > limit) throw tooLarge(bytes);
      chunks.push(chunk);
    }
  } finally {
    stream.destroy();
  }
  return Buffer.concat(chunks, bytes);
}

/** A far-side run held in memory (what a transport that offers only readBack returns) as a FarSideRun. */
export function farSideRunOf(files: ReadonlyMap<string, Buffer>): FarSideRun {
  const entries = [...files.entries()].map(([name, bytes]): [string, FarSideFile] => [
    name,
    { size: bytes.length, stream: async () => Readable.from([bytes]) },
  ]);
  return { files: new Map(entries), close: async () => undefined };
}

/**
 * A transport's readBack from its openBack: every file of the far-side run
 * whole (at most READ_BACK_LIMIT bytes each), then the run closed. A file
 * past the limit is refused with the code and message `tooLarge` gives it,
 * reason `too-large` and the details every transport gives it.
 */
export async function readFarSideRun(
  there: FarSideRun,
  where: { readonly to: string; readonly runId: string },
  tooLarge: (name: string) => { readonly code: ErrorCode; readonly message: string },
): Promise<Map<string, Buffer>> {
  try {
    const files = new Map<string, Buffer>();
    for (const [name, file] of there.files) {
      const refuse = (size: number) => {
        const { code, message } = tooLarge(name);
        return new OatsError(code, message, {
          ...where,
          file: name,
          reason: "too-large",
          size,
          limit: READ_BACK_LIMIT,
        });
      };
      files.set(name, await readFarSideFile(file, READ_BACK_LIMIT, refuse));
    }
    return files;
  } finally {
    await there.close();
  }
}
