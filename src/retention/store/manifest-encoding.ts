import { canonicalJson } from "../../core/index.js";
import type { ManifestRow } from "./manifest.js";
import { ManifestRowSink } from "./manifest-rows.js";

/**
 * The manifest document is canonicalJsonBytes({ schemaVersion: 1, rows }):
 * "rows" sorts before "schemaVersion", so it is this head, the rows'
 * canonical encodings joined by commas, and this tail. Encoding it a row at
 * a time gives the same bytes without holding every row as an object.
 */
const HEAD = '{"rows":[';
const TAIL = '],"schemaVersion":1}\n';

const LONE_SURROGATE = /\p{Surrogate}/u;

/**
 * One row's canonical JSON, without the document's closing newline. A row
 * has a fixed shape, so its members are spelled in canonical order (keys by
 * UTF-8 bytes) here, with JSON.stringify for the strings, as canonicalJson
 * writes them; a row whose strings canonicalJson would refuse (a lone
 * surrogate) goes to it, to be refused there. Encoding each row through
 * canonicalJson cost some 15 us a row, a third of a second for 20,000 files.
 */
export function encodeManifestRow(row: ManifestRow): string {
  if (
    row.type === "file" &&
    Number.isSafeInteger(row.size) &&
    row.size >= 0 &&
    typeof row.exec === "boolean" &&
    !LONE_SURROGATE.test(row.path) &&
    !LONE_SURROGATE.test(row.sha256)
  )
    return (
      `{"exec":${row.exec ? "true" : "false"},"path":${JSON.stringify(row.path)},` +
      `"sha256":${JSON.stringify(row.sha256)},"size":${row.size},"type":"file"}`
    );
  if (row.type === "symlink" && !LONE_SURROGATE.test(row.path) && !LONE_SURROGATE.test(row.target))
    return `{"path":${JSON.stringify(row.path)},"target":${JSON.stringify(row.target)},"type":"symlink"}`;
  const text = canonicalJson(row);
  return text.slice(0, text.length - 1);
}

const CHUNK_BYTES = 64 << 10;

/**
 * A leaf consumer that measures the manifest of the tree it is fed (as
 * ManifestBuilder does) and keeps only its encoded bytes. A row held as an
 * object with its strings costs several times its ~130 encoded bytes, and
 * every one of 20,000 of them lived until the revision was published: they
 * were the largest part of a retain's heap (docs/design/performance.md, "Peak
 * memory of a retain"). The bytes live in fixed chunks outside the JavaScript heap.
 */
export class ManifestRecorder extends ManifestRowSink {
  private readonly full: Buffer[] = [];
  private block = Buffer.allocUnsafe(CHUNK_BYTES);
  private used = 0;
  private rows = 0;

  /** A row measured elsewhere (a copy pass that hashed each file itself: sharing-writer.ts). */
  record(row: ManifestRow): void {
    this.add(row);
  }

  protected add(row: ManifestRow): void {
    this.append(this.rows === 0 ? encodeManifestRow(row) : `,${encodeManifestRow(row)}`);
    this.rows += 1;
  }

  private append(text: string): void {
    const length = Buffer.byteLength(text);
    if (this.used + length > this.block.length) {
      if (this.used > 0) this.full.push(this.block.subarray(0, this.used));
      this.block = Buffer.allocUnsafe(Math.max(CHUNK_BYTES, length));
      this.used = 0;
    }
    this.used += this.block.write(text, this.used);
  }

  /** The whole manifest document. */
  bytes(): Buffer {
    return Buffer.concat([Buffer.from(HEAD), ...this.full, this.block.subarray(0, this.used), Buffer.from(TAIL)]);
  }
}

/** The manifest document of `rows` (ManifestRecorder's bytes for the tree they were measured from). */
export function manifestDocument(rows: readonly ManifestRow[]): Buffer {
  const parts: string[] = [HEAD];
  for (let i = 0; i < rows.length; i++)
    parts.push(i === 0 ? encodeManifestRow(rows[i]!) : `,${encodeManifestRow(rows[i]!)}`);
  parts.push(TAIL);
  return Buffer.from(parts.join(""));
}
