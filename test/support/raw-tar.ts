/**
 * Hostile archives written byte by byte: ustar headers with their checksums,
 * pax extended headers ('x') carrying names no ustar field could hold. Used
 * by the limit and hostile-archive tests (acquisition-limits, acquisition-tarball) and the bench, so the
 * archives are made at test time rather than committed.
 */
import { gzipSync } from "node:zlib";

export interface RawEntry {
  readonly name: string;
  /** ustar typeflag: 0 file, 1 hard link, 2 symlink, 3 char device, 4 block device, 5 directory, 6 FIFO, x pax
   * extended header. */
  readonly type?: string;
  readonly body?: Buffer | string;
  readonly linkname?: string;
  readonly mode?: number;
  /** The size the header declares (defaults to the body's). */
  readonly size?: number;
  /** A pax `path` record put before this entry (for names longer than 100 bytes). */
  readonly paxPath?: string;
}

/** One 512-byte ustar header, checksum included. */
export function ustarHeader(
  entry: { readonly name: string; readonly type?: string; readonly linkname?: string; readonly mode?: number },
  size: number,
): Buffer {
  const header = Buffer.alloc(512);
  const put = (text: string, offset: number, length: number) => {
    if (Buffer.byteLength(text) > length) throw new Error(`${text.slice(0, 40)} does not fit in ${length} bytes`);
    header.write(text, offset, length, "utf8");
  };
  const octal = (value: number, offset: number, length: number) =>
    put(`${value.toString(8).padStart(length - 1, "0")}\0`, offset, length);
  put(entry.name, 0, 100);
  octal(entry.mode ?? (entry.type === "5" ? 0o755 : 0o644), 100, 8);
  octal(0, 108, 8);
  octal(0, 116, 8);
  octal(size, 124, 12);
  octal(0, 136, 12);
  header.fill(0x20, 148, 156);
  put(entry.type ?? "0", 156, 1);
  put(entry.linkname ?? "", 157, 100);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  octal(0, 329, 8);
  octal(0, 337, 8);
  let sum = 0;
  for (const byte of header) sum += byte;
  put(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8);
  return header;
}

/** A pax record "<len> <key>=<value>\n", its length counting itself. */
export function paxRecord(key: string, value: string): Buffer {
  const rest = ` ${key}=${value}\n`;
  const restBytes = Buffer.byteLength(rest);
  let length = restBytes + 1;
  while (String(length).length + restBytes !== length) length += 1;
  return Buffer.from(`${length}${rest}`);
}

const padding = (length: number) => Buffer.alloc((512 - (length % 512)) % 512);

/** The archive's bytes; `end: false` leaves out the two zero blocks that end it (a truncated archive). */
export function tarBytes(entries: readonly RawEntry[], options: { end?: boolean } = {}): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    if (entry.paxPath !== undefined) {
      const record = paxRecord("path", entry.paxPath);
      parts.push(ustarHeader({ name: "PaxHeader", type: "x" }, record.length), record, padding(record.length));
    }
    const body = typeof entry.body === "string" ? Buffer.from(entry.body) : (entry.body ?? Buffer.alloc(0));
    parts.push(ustarHeader(entry, entry.size ?? body.length), body, padding(body.length));
  }
  if (options.end !== false) parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

export const gzipTar = (entries: readonly RawEntry[]): Buffer => gzipSync(tarBytes(entries), { level: 9 });

/** `count` files at `depth` segments (the first being `top`), each named by a pax path. */
export function deepEntries(top: string, depth: number, count: number): RawEntry[] {
  const dir = [top, ...Array.from({ length: depth - 2 }, () => "d")].join("/");
  return Array.from({ length: count }, (_, index) => ({ name: `f${index}`, paxPath: `${dir}/f${index}`, body: "x" }));
}
