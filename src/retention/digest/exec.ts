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
function u64be(value: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigUInt64BE(BigInt(value));
  return out;
}

function lengthPrefixed(text: string): Buffer[] {
  const bytes = Buffer.from(text);
  return [u64be(bytes.length), bytes];
}

function execRecords(format: string, includes: (path: string) => boolean): TreeFraming {
  return {
    format,
    order: "bytes",
    header: () => [Buffer.from(`${format}\0`)],
    includes,
    fileHead: (path, mode, size) => [Buffer.from("F"), ...lengthPrefixed(path), Buffer.from([mode & 0o100 ? 1 : 0]), u64be(size)],
    fileTail: () => [],
    symlink: (path, target) => [Buffer.from("S"), ...lengthPrefixed(path), ...lengthPrefixed(target)],
  };
}

export const treeExecFraming = execRecords("oats.tree-exec.v1", () => true);

/** Skips every entry named node_modules at any depth, and a root-level oats-lock.json. */
export function isPackagePayload(path: string): boolean {
  return path !== "oats-lock.json" && !path.split("/").includes("node_modules");
}

export const packagePayloadExecFraming = execRecords("oats.package-payload-exec.v1", isPackagePayload);
