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
/** Concatenate record fields; numbers are written as u64be. */
function record(...fields: (Buffer | number)[]): Buffer[] {
  const size = fields.reduce<number>((sum, field) => sum + (typeof field === "number" ? 8 : field.length), 0);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const field of fields) {
    if (typeof field === "number") at = out.writeBigUInt64BE(BigInt(field), at);
    else at += field.copy(out, at);
  }
  return [out];
}

const F = Buffer.from("F");
const S = Buffer.from("S");
const EXEC = Buffer.from([1]);
const NO_EXEC = Buffer.from([0]);

function execRecords(format: "oats.tree-exec.v1" | "oats.package-payload-exec.v1", includes: (path: string) => boolean): TreeFraming {
  return {
    format,
    order: "bytes",
    header: () => [Buffer.from(`${format}\0`)],
    includes,
    fileHead: (path, mode, size) => {
      const name = Buffer.from(path);
      return record(F, name.length, name, mode & 0o100 ? EXEC : NO_EXEC, size);
    },
    fileTail: () => [],
    symlink: (path, target) => {
      const name = Buffer.from(path);
      const text = Buffer.from(target);
      return record(S, name.length, name, text.length, text);
    },
  };
}

export const treeExecFraming = execRecords("oats.tree-exec.v1", () => true);

/** Skips every entry named node_modules at any depth, and a root-level oats-lock.json. */
export function isPackagePayload(path: string): boolean {
  return path !== "oats-lock.json" && !path.split("/").includes("node_modules");
}

export const packagePayloadExecFraming = execRecords("oats.package-payload-exec.v1", isPackagePayload);
