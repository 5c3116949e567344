import type { TreeFraming } from "./framing.js";

/**
 * oats.tree-legacy.v0, verify-compatible with oats lock v2 integrity.
 *
 *   for each entry, depth-first pre-order, siblings in en-US collation order:
 *     regular file:  path "\0file\0" bytes "\0"
 *     symlink:       path "\0symlink\0" link-text "\0"
 *
 * Directories add nothing of their own, so empty directories are invisible;
 * modes are ignored; nothing is excluded. No length framing: kept only to
 * verify existing locks and evidence, never for approval.
 */
const NUL = Buffer.from([0]);
const TAIL = [NUL];

export const treeLegacyFraming: TreeFraming = {
  format: "oats.tree-legacy.v0",
  order: "legacy",
  header: () => [],
  includes: () => true,
  includesAll: true,
  fileHead: (path) => [Buffer.from(`${path}\0file\0`)],
  fileTail: () => TAIL,
  symlink: (path, target) => [Buffer.from(`${path}\0symlink\0${target}\0`)],
};
