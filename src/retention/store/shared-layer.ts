import { chmodSync, linkSync, lstatSync, readdirSync, renameSync, rmdirSync, unlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { asStepError, errnoCode } from "../../core/index.js";
import { hashFileHere, type FileHash } from "../parallel/file-hashes.js";
import { hashFilesInLanes } from "../parallel/pool.js";
import { ensureDirectory, ensureStoreAt, removeCreatedStore } from "./components.js";
import { faultPoint } from "./faults.js";
import { AGENTS_DIR, STAGING_PREFIX, stagingName } from "./layout.js";
import type { ManifestRow } from "./manifest.js";
import type { TreeListing } from "../digest/walk.js";
import { perFileDurability, sealStagedTree } from "./staging-writer.js";
import { heldMode } from "./modes.js";

/**
 * The shared file layer (docs/design/retention.md, "The shared file layer").
 * Each distinct (content, exec bit) a scope retains is held once, read-only,
 * at `.agents/files/sha256/<2 hex>/<62 hex>` (0444), or `...<62 hex>.x`
 * (0555) when executable; every revision's regular file is a hard link to
 * its held file. A held file's name is its own claim: it is hashed before it
 * is linked, and a held file that does not hash to its name is never linked.
 */

export const FILES_STORE: readonly string[] = [AGENTS_DIR, "files"];
export const HELD_ALGORITHM_DIR = "sha256";
const EXEC_SUFFIX = ".x";

/** The directory holding the layer's `<2 hex>` directories. */
export function heldRoot(scope: string): string {
  return join(scope, ...FILES_STORE, HELD_ALGORITHM_DIR);
}

/** Where the file with this SHA-256 (64 hex) and exec bit is held. */
export function heldPath(scope: string, sha256: string, exec: boolean): string {
  return join(heldRoot(scope), sha256.slice(0, 2), `${sha256.slice(2)}${exec ? EXEC_SUFFIX : ""}`);
}

/** The content and exec bit a held file's name claims, or null for a name that is not a held file's. */
export function parseHeldName(prefix: string, name: string): { sha256: string; exec: boolean } | null {
  const match = /^([0-9a-f]{62})(\.x)?$/.exec(name);
  if (!match || !/^[0-9a-f]{2}$/.test(prefix)) return null;
  return { sha256: `${prefix}${match[1]}`, exec: match[2] !== undefined };
}

/** A held file that did not hash to its name when a publication met it. */
export interface DamagedHeld {
  readonly held: string;
  readonly expected: string;
  /** What it hashed to; null when it could not be read as a regular file. */
  readonly actual: string | null;
}

/** How a publication's regular files reached the store (the receipt's `files`). */
export interface FilesOutcome {
  /** Linked to a file the layer already held (verified first). */
  linked: number;
  /** New to the layer: the staged file became the held file. */
  stored: number;
  /** Kept as a private copy because a link could not be made (`fallback` says why). */
  copied: number;
  /** The errno of the first link that failed (EXDEV, EMLINK, EPERM...). */
  fallback?: string;
  /** Held files that did not verify: never linked; replaced by the verified staged bytes. */
  damaged?: DamagedHeld[];
}

/** Link errors after which a file stays a private copy: the layer cannot link it here. */
export const FALLBACK_CODES = new Set(["EXDEV", "EMLINK", "EPERM", "ENOTSUP", "EOPNOTSUPP", "EACCES", "EROFS"]);

function link(from: string, to: string): void {
  faultPoint("link", to);
  linkSync(from, to);
}

/** Link a verified held file to a new name (a staging path nothing has written yet). */
export function linkNew(held: string, target: string): void {
  link(held, target);
}

/** Replace `target` by a hard link to `held`: linked beside it under a staging name, then renamed over it. */
export function linkOver(held: string, target: string): void {
  const temporary = join(dirname(target), stagingName());
  link(held, temporary);
  try {
    renameSync(temporary, target);
  } catch (error) {
    unlinkSync(temporary);
    throw error;
  }
}

/**
 * Make `file` (complete, durable, read-only, ours) the held file at `held`.
 * A new held file is linked into place under its name, which never replaces
 * and never shows a partial file (the file was whole before it was linked);
 * a damaged one (`replace`) is replaced atomically: the file is linked
 * beside it under a staging name and renamed over it. Returns false when the
 * name was taken meanwhile (a concurrent publisher's own held file).
 */
export function intern(file: string, held: string, replace: boolean): boolean {
  if (!replace) {
    try {
      link(file, held);
      return true;
    } catch (error) {
      if (errnoCode(error) === "EEXIST") return false;
      throw error;
    }
  }
  const temporary = join(dirname(held), stagingName());
  link(file, temporary);
  try {
    renameSync(temporary, held);
  } catch (error) {
    unlinkSync(temporary);
    throw error;
  }
  return true;
}

/** A held file verifies: it hashes to its name, is as large as the row says, and has the row's exec bit. */
function verifies(found: FileHash | null, row: FileRow): boolean {
  return (
    found !== null &&
    found.sha256 === row.sha256 &&
    found.size === row.size &&
    ((found.mode & 0o100) !== 0) === row.exec
  );
}

type FileRow = Extract<ManifestRow, { type: "file" }>;

/** What the copy pass already did (sharing-writer.ts): the paths it linked, and the first link it could not make. */
export interface AlreadyShared {
  readonly linked: { readonly size: number; has(path: string): boolean };
  readonly fallback: string | null;
}

/**
 * Share a verified staged tree's regular files through the layer (the
 * staging is this publication's own, its directories still writable): a
 * file the layer holds is hashed, and only if it verifies is the staged copy
 * replaced by a link to it; otherwise the staged file (whose bytes the
 * staged tree's read-back measured as `rows`) becomes the held file. Where a
 * link cannot be made the staged copy stays as it is. Returns what was done
 * and the layer directories it changed (to be made durable with the tree).
 */
export async function shareStagedTree(
  scope: string,
  staging: string,
  rows: readonly ManifestRow[],
  taken: TakeBack = newTakeBack(scope),
  already: AlreadyShared = { linked: new Set(), fallback: null },
): Promise<{ files: FilesOutcome; touched: string[] }> {
  const files: FilesOutcome = { linked: already.linked.size, stored: 0, copied: 0 };
  if (already.fallback !== null) files.fallback = already.fallback;
  // Files the copy pass linked from verified held files (sharing-writer.ts) are done.
  const fileRows = rows.filter((row): row is FileRow => row.type === "file" && !already.linked.has(row.path));
  const touched = new Set<string>();
  if (fileRows.length === 0) return { files, touched: [] };
  const fallBack = (code: string) => {
    files.copied += 1;
    files.fallback ??= code;
  };
  try {
    taken.directories.push(...ensureStoreAt(scope, FILES_STORE, [HELD_ALGORITHM_DIR]));
  } catch (error) {
    const code = errnoCode(error) ?? "unavailable";
    for (const row of fileRows) modeOf(join(staging, row.path), row.exec);
    for (let i = 0; i < fileRows.length; i++) fallBack(code);
    return { files, touched: [] };
  }
  // Every held file this tree would link, hashed once, beside each other (a worker lane takes half).
  const present = [...new Set(fileRows.map((row) => heldPath(scope, row.sha256, row.exec)))].filter(isRegularFile);
  const hashes = await hashFilesInLanes(present);
  const found = new Map(present.map((held, index) => [held, hashes[index]!]));
  const good = new Set<string>();
  const damaged = new Map<string, DamagedHeld>();
  for (const row of fileRows) {
    const held = heldPath(scope, row.sha256, row.exec);
    if (found.has(held) && !good.has(held) && !damaged.has(held)) {
      const hash = found.get(held)!;
      if (verifies(hash, row)) good.add(held);
      else damaged.set(held, { held, expected: row.sha256, actual: hash?.sha256 ?? null });
    }
  }
  const staged = (row: FileRow) => join(staging, row.path);
  for (const row of fileRows) {
    const held = heldPath(scope, row.sha256, row.exec);
    const file = staged(row);
    try {
      if (good.has(held)) {
        linkOver(held, file);
        touched.add(dirname(file));
        files.linked += 1;
        continue;
      }
      modeOf(file, row.exec);
      const prefix = dirname(held);
      if (ensureDirectory(prefix)) taken.directories.push(prefix);
      const replace = damaged.has(held);
      if (intern(file, held, replace)) {
        // A new held file goes again if the publication fails; a damaged one's replacement stays (it is sound).
        if (!replace) taken.files.push(held);
        touched.add(prefix);
        good.add(held);
        files.stored += 1;
        continue;
      }
      // Taken meanwhile by another publisher: linked only once it verifies, replaced otherwise.
      if (verifies(hashFileHere(held), row)) {
        linkOver(held, file);
        touched.add(dirname(file));
        good.add(held);
        files.linked += 1;
      } else {
        damaged.set(held, { held, expected: row.sha256, actual: hashFileHere(held)?.sha256 ?? null });
        intern(file, held, true);
        touched.add(prefix);
        good.add(held);
        files.stored += 1;
      }
    } catch (error) {
      const code = errnoCode(error);
      if (code && FALLBACK_CODES.has(code)) fallBack(code);
      else throw asStepError("link", error, { path: row.path, held });
    }
  }
  if (damaged.size > 0) files.damaged = [...damaged.values()];
  return { files, touched: [...touched] };
}

/** What a publication added to the layer, taken back when it fails before its rename (takeBackShared). */
export interface TakeBack {
  readonly scope: string;
  /** Held files it stored new. */
  readonly files: string[];
  /** Layer directories it created, parents first. */
  readonly directories: string[];
}

export function newTakeBack(scope: string): TakeBack {
  return { scope, files: [], directories: [] };
}

/**
 * Undo a failed publication's additions to the layer, once its staging is
 * removed: each held file it stored goes if nothing links it now (a link
 * count of 1: another publisher may have linked it meanwhile, and then it
 * stays), and the directories it created go when empty. Best effort: what
 * is left is gc's to remove.
 */
export function takeBackShared(taken: TakeBack): void {
  for (const held of taken.files) {
    try {
      if (lstatSync(held).nlink === 1) unlinkSync(held);
    } catch {
      // gone, or not ours to judge: gc's
    }
  }
  const root = join(taken.scope, ...FILES_STORE);
  const prefixes = taken.directories.filter((dir) => dir.startsWith(`${heldRoot(taken.scope)}/`));
  for (const dir of [...new Set([...prefixes, ...taken.files.map((file) => dirname(file))])]) {
    try {
      rmdirSync(dir);
    } catch {
      // not empty, or gone
    }
  }
  removeCreatedStore(
    taken.directories.filter((dir) => !prefixes.includes(dir)),
    root,
  );
}

/** Give a staged file its held mode (0444, or 0555 with the exec bit) unless it has it. */
function modeOf(file: string, exec: boolean): void {
  const mode = lstatSync(file).mode & 0o7777;
  if (mode !== heldMode(exec)) chmodSync(file, heldMode(exec));
}

function isRegularFile(path: string): boolean {
  try {
    return lstatSync(path).isFile();
  } catch {
    return false;
  }
}

/**
 * The last step of a publication before its rename: share the verified
 * staged tree's files (shareStagedTree, with the rows its read-back
 * measured), then make its directories read-only and the whole durable.
 */
export async function shareAndSeal(
  staging: string,
  stored: TreeListing,
  manifest: { bytes(): Buffer },
  taken: TakeBack,
  already?: AlreadyShared,
): Promise<FilesOutcome> {
  const rows = (JSON.parse(manifest.bytes().toString("utf8")) as { rows: ManifestRow[] }).rows;
  const { files, touched } = await shareStagedTree(taken.scope, staging, rows, taken, already);
  await sealStagedTree(staging, stored, perFileDurability(stored), touched);
  return files;
}

/** One entry of the layer: a held file, or a staging name a replacement left (cleanup's). */
export interface HeldEntry {
  readonly path: string;
  readonly sha256: string;
  readonly exec: boolean;
}

/**
 * Every held file of the scope's layer, in name order, and what else is
 * there: staging names (a crashed replacement's) and names the layer never
 * writes. Empty when the scope has no layer.
 */
export function listHeldFiles(scope: string): { held: HeldEntry[]; staging: string[]; unexpected: string[] } {
  const out = { held: [] as HeldEntry[], staging: [] as string[], unexpected: [] as string[] };
  const root = heldRoot(scope);
  let prefixes: string[];
  try {
    prefixes = readdirSync(root).sort();
  } catch {
    return out;
  }
  for (const prefix of prefixes) {
    const dir = join(root, prefix);
    if (!/^[0-9a-f]{2}$/.test(prefix) || !lstatSync(dir).isDirectory()) {
      out.unexpected.push(dir);
      continue;
    }
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (name.startsWith(STAGING_PREFIX)) {
        out.staging.push(path);
        continue;
      }
      const parsed = parseHeldName(prefix, name);
      if (parsed && lstatSync(path).isFile()) out.held.push({ path, ...parsed });
      else out.unexpected.push(path);
    }
  }
  return out;
}
