/**
 * The header blocks of a POSIX tar (ustar, with pax extended headers), as
 * the project writes them. Pure: bytes in, bytes out, no I/O.
 *
 * A ustar header is one 512-byte block:
 *
 *   offset size  field
 *        0  100  name        (the part of the path after `prefix`)
 *      100    8  mode        octal
 *      108    8  uid         octal
 *      116    8  gid         octal
 *      124   12  size        octal (base-256 above 8 GiB - 1)
 *      136   12  mtime       octal
 *      148    8  checksum    octal: the sum of all 512 bytes, this field counted as spaces
 *      156    1  typeflag    '0' file, '2' symlink, '5' directory, 'x' pax extended header
 *      157  100  linkname    a symlink's text
 *      257    8  magic       "ustar\0" and version "00"
 *      265   32  uname, 297 32 gname (empty here)
 *      329    8  devmajor, 337 8 devminor (octal 0)
 *      345  155  prefix      the path's leading directories
 *
 * A numeric field is zero-padded octal digits, a space and a NUL (the
 * digits alone and a NUL when they fill the field); a text field is UTF-8,
 * NUL-padded, and not terminated when it fills the field. A field with no
 * value is left all NUL.
 *
 * A path or link text that does not fit (or is not ASCII) travels in a pax
 * extended header first: a `typeflag x` block named `PaxHeader/<base name>`
 * whose body is records `"<length> <key>=<value>\n"`, the length in decimal
 * counting the whole record including its own digits, padded to whole
 * blocks. Readers take the path and link text from it; the ustar fields then
 * hold a truncated form.
 *
 * The bytes are exactly those node-tar 7's Header and Pax classes wrote for
 * the same entries (the project's writer before this module), so a tree's
 * bundle and fleet layer, and their digests, did not change with it. That
 * includes node-tar's choices where the format leaves room:
 * - a path of 100 bytes or more is split at the rightmost `/` that leaves a
 *   prefix of at most 155 bytes; a directory's trailing `/` is dropped when
 *   it is split; a single-segment name of 100 bytes or more gets the prefix
 *   `.`; when no split fits, the name field holds the path's first 99
 *   characters, no prefix, and the pax header carries it;
 * - a name segment over 100 bytes is cut to its first 99 characters;
 * - the pax records are `path` then `linkpath`, nothing else; a size over
 *   the octal maximum is written base-256 (GNU) in the ustar field, which
 *   GNU tar and node-tar read, and also forces a (path-only) pax header;
 * - the pax header's own block: mode 0644, uid, gid and mtime left NUL.
 */

export const BLOCK_SIZE = 512;
/** The end of an archive: two zero blocks. */
export const END_OF_ARCHIVE = Buffer.alloc(2 * BLOCK_SIZE);

const NAME_SIZE = 100;
const PREFIX_SIZE = 155;
const MAX_OCTAL = { 8: 0o7777777, 12: 0o77777777777 } as const;
/** The smallest value whose digits fill the field but for its NUL (no room for the space). */
const OCTAL_FULL = { 8: 0o1000000, 12: 0o10000000000 } as const;

export type TarEntryType = "File" | "Directory" | "SymbolicLink";

const TYPEFLAG: Record<TarEntryType, number> = { File: 0x30, SymbolicLink: 0x32, Directory: 0x35 };
const PAX_TYPEFLAG = 0x78;

/** One entry as the writer emits it; owner 0, mtime 0 and empty owner names are fixed. */
export interface TarEntryHeader {
  /** Relative, `/`-separated, no empty, `.` or `..` segments; a directory's ends with `/`. */
  readonly path: string;
  readonly type: TarEntryType;
  readonly mode: number;
  readonly size: number;
  readonly linkpath?: string;
}

interface UstarFields {
  readonly path: string;
  readonly mode: number;
  readonly owner: boolean;
  readonly size: number;
  readonly mtime: boolean;
  readonly typeflag: number;
  readonly linkpath: string | undefined;
}

/** Where a path goes in the name and prefix fields; `fits` false when a pax header must carry it. */
export function splitPath(path: string): { readonly name: string; readonly prefix: string; readonly fits: boolean } {
  if (Buffer.byteLength(path) < NAME_SIZE) return { name: path, prefix: "", fits: true };
  const trimmed = path.endsWith("/") ? path.slice(0, -1) : path;
  let slash = trimmed.lastIndexOf("/");
  if (slash === -1) return named(trimmed, ".");
  while (slash > 0) {
    const prefix = trimmed.slice(0, slash);
    if (Buffer.byteLength(prefix) <= PREFIX_SIZE) return named(trimmed.slice(slash + 1), prefix);
    slash = trimmed.lastIndexOf("/", slash - 1);
  }
  return { name: path.slice(0, NAME_SIZE - 1), prefix: "", fits: false };
}

function named(name: string, prefix: string): { name: string; prefix: string; fits: boolean } {
  return Buffer.byteLength(name) <= NAME_SIZE
    ? { name, prefix, fits: true }
    : { name: name.slice(0, NAME_SIZE - 1), prefix, fits: false };
}

/**
 * A text field; true when the text is not ASCII or longer than the field (a
 * pax header must carry it). ASCII, the common case, is copied a character
 * at a time: Buffer#write's checks cost more than the copy for names this
 * short, twenty thousand times over.
 */
function writeText(block: Buffer, offset: number, size: number, text: string): boolean {
  const length = Math.min(size, text.length);
  for (let index = 0; index < length; index++) {
    const code = text.charCodeAt(index);
    if (code >= 0x80) return writeUtf8(block, offset, size, text);
    block[offset + index] = code;
  }
  for (let index = length; index < text.length; index++)
    if (text.charCodeAt(index) >= 0x80) return writeUtf8(block, offset, size, text);
  return text.length > size;
}

function writeUtf8(block: Buffer, offset: number, size: number, text: string): true {
  block.fill(0, offset, offset + size);
  // Whole UTF-8 characters only: one that would not fit is left out, its bytes stay NUL.
  block.write(text, offset, size, "utf8");
  return true;
}

/** A numeric field; true when the value is over the octal maximum and was written base-256. */
function writeNumber(block: Buffer, offset: number, size: 8 | 12, value: number): boolean {
  if (value > MAX_OCTAL[size]) {
    block[offset] = 0x80;
    let rest = value;
    for (let at = offset + size - 1; at > offset; at--) {
      block[at] = rest % 0x100;
      rest = Math.floor(rest / 0x100);
    }
    return true;
  }
  // Zero-padded digits, a space and a NUL; the digits and a NUL when they need the space's place.
  const width = value >= OCTAL_FULL[size] ? size - 1 : size - 2;
  let rest = value;
  for (let at = offset + width - 1; at >= offset; at--) {
    block[at] = 0x30 + (rest % 8);
    rest = Math.floor(rest / 8);
  }
  if (width === size - 2) block[offset + width] = 0x20;
  block[offset + size - 1] = 0;
  return false;
}

const MAGIC = "ustar\u000000";

/**
 * The fields that do not depend on the entry's name or size (mode, owner,
 * mtime, typeflag, magic, device numbers), encoded once per kind of entry:
 * a bundle's twenty thousand headers come in two or three kinds.
 */
const templates = new Map<string, Uint8Array>();

function template(fields: UstarFields): Uint8Array {
  const key = `${fields.typeflag} ${fields.mode} ${fields.owner} ${fields.mtime}`;
  let block = templates.get(key);
  if (block === undefined) {
    const bytes = Buffer.alloc(BLOCK_SIZE);
    writeNumber(bytes, 100, 8, fields.mode);
    if (fields.owner) {
      writeNumber(bytes, 108, 8, 0);
      writeNumber(bytes, 116, 8, 0);
    }
    if (fields.mtime) writeNumber(bytes, 136, 12, 0);
    bytes[156] = fields.typeflag;
    writeText(bytes, 257, 8, MAGIC);
    writeNumber(bytes, 329, 8, 0);
    writeNumber(bytes, 337, 8, 0);
    block = new Uint8Array(bytes);
    templates.set(key, block);
  }
  return block;
}

/** Fill `block` (512 bytes) with one ustar header; true when a pax header must precede it. */
function writeUstar(block: Buffer, fields: UstarFields): boolean {
  block.set(template(fields));
  const split = splitPath(fields.path);
  let pax = !split.fits;
  pax = writeText(block, 0, NAME_SIZE, split.name) || pax;
  pax = writeNumber(block, 124, 12, fields.size) || pax;
  if (fields.linkpath !== undefined) pax = writeText(block, 157, NAME_SIZE, fields.linkpath) || pax;
  pax = writeText(block, 345, PREFIX_SIZE, split.prefix) || pax;
  writeNumber(block, 148, 8, checksum(block));
  return pax;
}

/** The sum of the block's bytes with the checksum field taken as eight spaces. */
export function checksum(block: Buffer): number {
  let sum = 8 * 0x20;
  for (let at = 0; at < 148; at++) sum += block[at]!;
  for (let at = 156; at < BLOCK_SIZE; at++) sum += block[at]!;
  return sum;
}

/** One pax record: its decimal length counts the whole record, its own digits included. */
export function paxRecord(key: string, value: string): string {
  const rest = ` ${key}=${value}\n`;
  const bytes = Buffer.byteLength(rest);
  let length = bytes + String(bytes).length;
  if (String(length).length !== String(bytes).length) length = bytes + String(length).length;
  return `${length}${rest}`;
}

/** The pax extended header (its header block and its body, padded) that carries an entry's path and link text. */
export function paxHeader(path: string, linkpath?: string): Buffer {
  const body = paxRecord("path", path) + (linkpath !== undefined ? paxRecord("linkpath", linkpath) : "");
  const bodyBytes = Buffer.byteLength(body);
  const out = Buffer.alloc(BLOCK_SIZE + Math.ceil(bodyBytes / BLOCK_SIZE) * BLOCK_SIZE);
  const trimmed = path.endsWith("/") ? path.slice(0, -1) : path;
  const base = trimmed.slice(trimmed.lastIndexOf("/") + 1);
  writeUstar(out, {
    path: `PaxHeader/${base}`.slice(0, NAME_SIZE - 1),
    mode: 0o644,
    owner: false,
    size: bodyBytes,
    mtime: false,
    typeflag: PAX_TYPEFLAG,
    linkpath: undefined,
  });
  out.write(body, BLOCK_SIZE, bodyBytes, "utf8");
  return out;
}

/**
 * Encode one entry's header into `block` (512 bytes, reused by the caller).
 * Returns the pax extended header that must be written before it, or null
 * when the ustar fields hold everything.
 */
export function encodeEntryHeader(block: Buffer, entry: TarEntryHeader): Buffer | null {
  const pax = writeUstar(block, {
    path: entry.path,
    mode: entry.mode,
    owner: true,
    size: entry.size,
    mtime: true,
    typeflag: TYPEFLAG[entry.type],
    linkpath: entry.linkpath,
  });
  return pax ? paxHeader(entry.path, entry.linkpath) : null;
}

/** An entry's header bytes (pax header, if any, then the ustar block) in a new buffer. */
export function entryHeaderBytes(entry: TarEntryHeader): Buffer {
  const block = Buffer.alloc(BLOCK_SIZE);
  const pax = encodeEntryHeader(block, entry);
  return pax ? Buffer.concat([pax, block]) : block;
}
