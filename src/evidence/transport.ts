import { isAbsolute, normalize } from "node:path";
import { z } from "zod";
import { OatsError } from "../core/index.js";
import type { EvidenceFile, FarSideRun } from "./evidence-file.js";
import { dirTransport, type DirTransportOptions } from "./transport-dir.js";
import { ociTransport } from "./transport-oci.js";

/**
 * The seam between the outbox and a far side. The outbox owns order,
 * durability and the delivered marks; a transport only moves one run's files
 * and reads them back. Delivery is proved by `readBack`, which must read from
 * the far side itself (never from a local copy or a cache of what was put):
 * the outbox compares the digest of every file it returns with the digest it
 * queued, and only then marks the entry delivered.
 *
 * Both directions stream (evidence-file.ts): put is handed each file as an
 * EvidenceFile (size and digest known, bytes read on demand through a
 * bounded buffer), and `openBack` lists what the far side holds with a
 * stream of each file, which the outbox hashes as it passes. A transport
 * that offers only `readBack` (whole files in memory) still works: the
 * outbox then reads its buffers, bounded by READ_BACK_LIMIT.
 *
 * A new transport implements this interface and registers its scheme in
 * SCHEMES (as the OCI registry transport does: `oci://`, and
 * `http://` for a loopback registry); the outbox, the posture and the
 * properties do not change.
 */

/** The files of one run, exactly as queued. Names are fixed: see EVIDENCE_FILES. */
export const EVIDENCE_FILES = ["record.json", "log", "audit.jsonl"] as const;
export type EvidenceFileName = (typeof EVIDENCE_FILES)[number];

export interface EvidenceBundle {
  /** `oats.json.v1:<hex>`: the sealed record's digest. */
  readonly runId: string;
  /** The outbox position, for transports that want to keep order visible on their side. */
  readonly seq: number;
  /** Each file in memory, or streamed from where it is held (the outbox hands over its log so). */
  readonly files: ReadonlyMap<EvidenceFileName, Buffer | EvidenceFile>;
}

export interface ProbeResult {
  readonly state: "reachable" | "unreachable";
  /** Why it is unreachable (missing, not-a-directory, same-filesystem, ...); null when reachable. */
  readonly reason: string | null;
  /**
   * The typed refusal behind an unreachable far side that speaks a protocol of its own (a registry:
   * `registry-refused`), so a push reports the outage with the code every other command gives it.
   */
  readonly refusal?: OatsError;
}

export interface EvidenceTransport {
  /** The destination in its canonical text form (`dir:/abs/path`); delivered marks are kept per destination. */
  describe(): string;
  /** Whether a put could reach the far side now. Never throws for an unreachable far side. */
  probe(): Promise<ProbeResult>;
  /**
   * Store the bundle under its run id. Idempotent for the same bytes; a run id
   * already present with other content is `integrity-mismatch`, and nothing
   * there is replaced.
   */
  put(bundle: EvidenceBundle): Promise<void>;
  /**
   * Every file the far side holds for the run id (null when it holds nothing), read from the far side, each
   * whole (at most READ_BACK_LIMIT bytes).
   */
  readBack(runId: string): Promise<Map<string, Buffer> | null>;
  /**
   * The same, streaming: every file the far side holds for the run id with its stated size and a stream of its
   * bytes read from the far side (null when it holds nothing). The caller closes what it opened.
   */
  openBack?(runId: string): Promise<FarSideRun | null>;
}

export interface TransportContext {
  /** A local path (the scope's outbox) a `dir:` share must not share a filesystem with, unless allowed. */
  readonly localPath?: string;
  /** Accept a share on the same filesystem as localPath (an unmounted mount point then receives the evidence). */
  readonly allowSameFilesystem?: boolean;
  /** Plain HTTP to an oci:// registry (loopback only; the OCI client refuses anything else). */
  readonly insecure?: boolean;
}

const DESTINATION = z
  .string()
  .min(1)
  .max(4096)
  .refine((text) => !text.includes("\0"), "contains a NUL byte");

type Factory = (rest: string, text: string, context: TransportContext) => EvidenceTransport;

function dirFactory(rest: string, text: string, context: TransportContext): EvidenceTransport {
  const path = z
    .string()
    .refine((value) => isAbsolute(value), "the share must be an absolute path (dir:/mnt/evidence)")
    .refine((value) => normalize(value) === value, "the share path must be normalised (no . or .. or doubled slashes)")
    .safeParse(rest);
  if (!path.success) throw invalidDestination(text, path.error.issues[0]?.message ?? "invalid path");
  const options: DirTransportOptions = {
    ...(context.localPath === undefined ? {} : { localPath: context.localPath }),
    allowSameFilesystem: context.allowSameFilesystem === true,
  };
  return dirTransport(rest.length > 1 ? rest.replace(/\/$/, "") : rest, options);
}

/** `oci://host[:port]/repository` (HTTPS; `--insecure` for plain HTTP), or `http://` to a loopback registry only: src/evidence/transport-oci.ts. */
function ociFactory(_rest: string, text: string, context: TransportContext): EvidenceTransport {
  return ociTransport(text, context.insecure === true ? { insecure: true } : {});
}

/** Schemes by name; a Map, so a destination like `__proto__:x` names nothing. */
const SCHEMES = new Map<string, Factory>([
  ["dir", dirFactory],
  ["oci", ociFactory],
  ["http", ociFactory],
]);

function invalidDestination(text: string, reason: string): OatsError {
  return new OatsError("invalid-input", `invalid evidence destination ${JSON.stringify(text)}: ${reason}`, {
    to: text,
    reason,
  });
}

/**
 * Parse and validate a destination: `dir:/abs/path` or `oci://host/repo`. An
 * unknown scheme is `usage`; a malformed destination of a known scheme is
 * `invalid-input`. Nothing is touched on disk or on the network.
 */
export function transportFor(to: string, context: TransportContext = {}): EvidenceTransport {
  const parsed = DESTINATION.safeParse(to);
  if (!parsed.success) throw invalidDestination(String(to), parsed.error.issues[0]?.message ?? "not a string");
  const text = parsed.data;
  const match = /^([A-Za-z0-9_+.-]+):(.*)$/s.exec(text);
  if (!match)
    throw new OatsError("usage", `an evidence destination names its scheme: dir:/path (got ${JSON.stringify(text)})`, {
      to: text,
      reason: "no-scheme",
    });
  const factory = SCHEMES.get(match[1]!);
  if (!factory)
    throw new OatsError(
      "usage",
      `unknown evidence destination scheme ${JSON.stringify(match[1])} (known: ${[...SCHEMES.keys()].join(", ")})`,
      { to: text, reason: "unknown-scheme", scheme: match[1] },
    );
  return factory(match[2]!, text, context);
}
