import { parentPort } from "node:worker_threads";
import { OatsError } from "../../core/index.js";
import type { TreeFormat } from "../digest/integrity.js";
import { markLaneWorker } from "../digest/busy.js";
import { measureHere } from "./pool.js";
import { hashFilesHere, type FileHash } from "./file-hashes.js";

/**
 * A worker thread of the digest pool (pool.ts): it walks and hashes one
 * directory per message, exactly as the calling thread would (measureHere:
 * walkTree, digestListing), and answers with the digests or the error. It loads the
 * digest modules alone, so a worker starts in tens of milliseconds.
 */

export interface DigestRequest {
  readonly id: number;
  readonly dir: string;
  readonly formats: readonly TreeFormat[];
  readonly maxDepth?: number;
  /** Post the listing's shape (listing-shape.ts) once the walk is done, before the digests. */
  readonly shape?: true;
}

/** Hash single files (file-hashes.ts) instead of walking a tree: the shared file layer's check of held files. */
export interface FileHashRequest {
  readonly id: number;
  readonly files: readonly string[];
}

export type SerializedError =
  | {
      readonly oats: true;
      readonly code: OatsError["code"];
      readonly message: string;
      readonly details: Record<string, unknown>;
    }
  | { readonly oats: false; readonly message: string; readonly code?: string; readonly stack?: string };

export type DigestAnswer =
  | { readonly id: number; readonly digests: Record<string, string> }
  | { readonly id: number; readonly error: SerializedError }
  | { readonly id: number; readonly shape: string }
  | { readonly id: number; readonly hashes: (FileHash | null)[] };

function serialize(error: unknown): SerializedError {
  if (error instanceof OatsError)
    return { oats: true, code: error.code, message: error.message, details: structuredSafe(error.details) };
  const plain = error as { message?: unknown; code?: unknown; stack?: unknown } | null;
  return {
    oats: false,
    message: typeof plain?.message === "string" ? plain.message : String(error),
    ...(typeof plain?.code === "string" ? { code: plain.code } : {}),
    ...(typeof plain?.stack === "string" ? { stack: plain.stack } : {}),
  };
}

/** Details are plain data by convention; anything that cannot be cloned is sent as its JSON. */
function structuredSafe(details: Record<string, unknown>): Record<string, unknown> {
  try {
    structuredClone(details);
    return details;
  } catch {
    return JSON.parse(JSON.stringify(details)) as Record<string, unknown>;
  }
}

markLaneWorker();

async function answer(request: DigestRequest): Promise<void> {
  try {
    const onShape = request.shape
      ? (shape: string) => parentPort!.postMessage({ id: request.id, shape } satisfies DigestAnswer)
      : undefined;
    const digests = await measureHere({
      dir: request.dir,
      formats: request.formats,
      ...(request.maxDepth === undefined ? {} : { maxDepth: request.maxDepth }),
      ...(onShape ? { onShape } : {}),
    });
    parentPort!.postMessage({ id: request.id, digests } satisfies DigestAnswer);
  } catch (error) {
    parentPort!.postMessage({ id: request.id, error: serialize(error) } satisfies DigestAnswer);
  }
}

// Jobs run one after another, in the order they came: a caller may send the
// next before the last is answered, so this thread never waits for a busy
// caller to read an answer before it starts the next tree.
let previous: Promise<void> = Promise.resolve();
parentPort!.on("message", (request: DigestRequest | FileHashRequest) => {
  // answer() posts its own failures; the catch only keeps one that could not be posted from stopping every later job.
  previous = previous
    .then(() =>
      "files" in request
        ? parentPort!.postMessage({ id: request.id, hashes: hashFilesHere(request.files) } satisfies DigestAnswer)
        : answer(request),
    )
    .catch(() => undefined);
});
