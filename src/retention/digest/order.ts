import type { DirectoryEntry, LeafEntry, Listed, TreeEntry } from "../../engine/index.js";

/**
 * The two orders a tree's leaves are hashed in: tree-exec's, by the UTF-8
 * bytes of the full path, which the walk yields by visiting sorted siblings
 * depth first; and the legacy format's, by a collator (kept only to verify
 * old digests).
 */

/** Built on first use: constructing it loads ICU collation data (~10 ms), which only legacy digests need. */
let collator: Intl.Collator | undefined;

/** Legacy collation, with a byte-order tie-break so that names the collator deems equal still sort one way. */
export function compareLegacyNames(a: string, b: string): number {
  collator ??= new Intl.Collator("en-US");
  return collator.compare(a, b) || Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/**
 * UTF-16 code units from U+D800 up: where comparing JS strings stops agreeing
 * with comparing their UTF-8 bytes (a surrogate pair sorts below U+E000..U+FFFF
 * as UTF-16, above it as UTF-8). U+FFFD, the mark of a name Node could not
 * decode, is among them.
 */
export const BEYOND_UTF16_ORDER = /[\uD800-\uFFFF]/;

/**
 * Siblings in tree-exec order: by the UTF-8 bytes of their names, a directory
 * taken as its name followed by "/" (which every path below it starts with).
 * Visiting sorted siblings depth first then yields every leaf in the order of
 * the UTF-8 bytes of its full path, with no sort of the whole tree. Names are
 * distinct and hold no "/", so only a name that is a prefix of its sibling's
 * needs the "/" looked at. For names below U+D800, UTF-16 order is UTF-8 order.
 */
export function compareSiblings(a: Listed, b: Listed): number {
  const x = a.name;
  const y = b.name;
  if (x.length < y.length && a.isDirectory() && y.startsWith(x)) return "/" < y[x.length]! ? -1 : 1;
  if (y.length < x.length && b.isDirectory() && x.startsWith(y)) return x[y.length]! < "/" ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

const siblingKey = (entry: Listed): Buffer => Buffer.from(entry.isDirectory() ? `${entry.name}/` : entry.name);

export function compareSiblingBytes(a: Listed, b: Listed): number {
  return Buffer.compare(siblingKey(a), siblingKey(b));
}

/** Legacy order: depth-first pre-order over the collated children (an explicit stack, like the walk). */
export function legacyOrder(root: DirectoryEntry): LeafEntry[] {
  const out: LeafEntry[] = [];
  const collate = (directory: DirectoryEntry) =>
    [...directory.children].sort((a, b) => compareLegacyNames(a.name, b.name));
  const stack: { children: TreeEntry[]; next: number }[] = [{ children: collate(root), next: 0 }];
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    if (frame.next === frame.children.length) {
      stack.pop();
      continue;
    }
    const child = frame.children[frame.next++]!;
    if (child.type === "directory") stack.push({ children: collate(child), next: 0 });
    else out.push(child);
  }
  return out;
}
