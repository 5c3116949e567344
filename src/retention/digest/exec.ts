import type { TreeFraming } from "./framing.js";

/**
 * oats.tree-exec.v1, the identity for everything new, and
 * oats.package-payload-exec.v1, the same records under their own name.
 *
 *   format-name "\0"
 *   then for each file or symlink, sorted by the UTF-8 bytes of its path:
 *     file:     "F" u64be(len path) path exec-byte u64be(size) content
 *     symlink:  "S" u64be(len path) path u64be(len target) target
 *
 * exec-byte is 1 when the owner-execute bit (mode & 0o100) is set, else 0.
 * Empty directories and all other mode bits are outside identity.
 */
/** u64be of a safe integer (sizes and lengths): plain byte stores, no BigInt, no bounds-checking helpers. */
function writeU64(out: Buffer, value: number, at: number): number {
  const high = Math.floor(value / 0x1_0000_0000);
  const low = value >>> 0;
  out[at] = high >>> 24;
  out[at + 1] = (high >>> 16) & 0xff;
  out[at + 2] = (high >>> 8) & 0xff;
  out[at + 3] = high & 0xff;
  out[at + 4] = low >>> 24;
  out[at + 5] = (low >>> 16) & 0xff;
  out[at + 6] = (low >>> 8) & 0xff;
  out[at + 7] = low & 0xff;
  return at + 8;
}

const F = 0x46; // "F"
const S = 0x53; // "S"

/** One buffer per record: small ones come from Node's shared pool, so a file costs no allocation of its own. */
function fileRecord(path: string, mode: number, size: number): Buffer[] {
  const length = Buffer.byteLength(path);
  const out = Buffer.allocUnsafe(1 + 8 + length + 1 + 8);
  out[0] = F;
  let at = writeU64(out, length, 1);
  at += out.write(path, at, "utf8");
  out[at++] = mode & 0o100 ? 1 : 0;
  writeU64(out, size, at);
  return [out];
}

/**
 * fileRecord() without a buffer of its own, for an ASCII path (the common
 * case, and the only one whose byte length is its string length): a tree of
 * twenty thousand small files allocated one record buffer a file, and a
 * CLI digest spent some 20 ms of its 300 in Buffer.write, buffer creation
 * and the collections they caused.
 */
function writeFileRecord(out: Buffer, at: number, path: string, mode: number, size: number): number {
  const length = path.length;
  if (at + 1 + 8 + length + 1 + 8 > out.length) return -1;
  const start = at + 1 + 8;
  for (let i = 0; i < length; i++) {
    const code = path.charCodeAt(i);
    if (code > 0x7f) return -1;
    out[start + i] = code;
  }
  out[at] = F;
  writeU64(out, length, at + 1);
  out[start + length] = mode & 0o100 ? 1 : 0;
  return writeU64(out, size, start + length + 1);
}

/** No tail: one array for every file. */
const NO_TAIL: Buffer[] = [];

function symlinkRecord(path: string, target: string): Buffer[] {
  const length = Buffer.byteLength(path);
  const targetLength = Buffer.byteLength(target);
  const out = Buffer.allocUnsafe(1 + 8 + length + 8 + targetLength);
  out[0] = S;
  let at = writeU64(out, length, 1);
  at += out.write(path, at, "utf8");
  at = writeU64(out, targetLength, at);
  out.write(target, at, "utf8");
  return [out];
}

function execRecords(
  format: "oats.tree-exec.v1" | "oats.package-payload-exec.v1",
  includes: (path: string) => boolean,
  includesAll: boolean,
): TreeFraming {
  return {
    format,
    order: "bytes",
    header: () => [Buffer.from(`${format}\0`)],
    includes,
    includesAll,
    fileHead: fileRecord,
    writeFileHead: writeFileRecord,
    fileTail: () => NO_TAIL,
    symlink: symlinkRecord,
  };
}

export const treeExecFraming = execRecords("oats.tree-exec.v1", () => true, true);

/** Skips every entry named node_modules at any depth, and a root-level oats-lock.json. */
export function isPackagePayload(path: string): boolean {
  return path !== "oats-lock.json" && !path.split("/").includes("node_modules");
}

export const packagePayloadExecFraming = execRecords("oats.package-payload-exec.v1", isPackagePayload, false);
