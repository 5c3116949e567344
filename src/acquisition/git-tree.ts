import { createHash } from "node:crypto";
import { OatsError } from "../core/index.js";
import { entryPath, entryRefusal } from "./entry-path.js";
import { extractLimits, type ExtractLimits } from "./extract.js";
import { collectStderr, gitFailed, gitUnavailable, spawnGit, type CommitTree, type TreeEntry } from "./git.js";
import { TreeWriter, type FileSink } from "./tree-writer.js";

/**
 * A commit's tree, written from the object database (see git.ts for how git
 * is run and docs/design/acquisition.md for why no archive or checkout).
 */

export interface ArchiveOptions {
  readonly limits?: Partial<ExtractLimits>;
}

/** The longest symlink text accepted (PATH_MAX): a link's blob is held in memory, a file's is streamed. */
const MAX_LINK_BYTES = 4096;

/**
 * Write the commit's tree into `dest` from the object database: the listing
 * (`ls-tree`) gives every path, mode and blob id, `cat-file --batch` gives
 * each blob's raw bytes, and the extractor's TreeWriter writes them with the
 * extractor's name, collision and limit rules. No attribute, filter,
 * textconv or working-tree code of the repository runs (no archive, no
 * checkout); each blob is hashed as it is written and must have the id the
 * tree names, so a damaged or doctored object database is refused rather
 * than retained under the commit's name.
 */
export async function writeCommitTree(
  repo: string,
  tree: CommitTree,
  listing: ReadonlyMap<string, TreeEntry>,
  dest: string,
  options: ArchiveOptions = {},
): Promise<void> {
  const origin = `git commit ${tree.commit} (${repo})`;
  const limits = extractLimits(options.limits);
  const writer = new TreeWriter(dest, origin, limits);
  const order: Array<{ path: string; raw: string; entry: TreeEntry }> = [];
  for (const [raw, entry] of listing) {
    writer.countEntry();
    if (!OBJECT_ID.test(entry.oid) || entry.type !== "blob")
      throw entryRefusal(
        origin,
        "unsupported-entry",
        raw,
        `mode ${entry.mode} ${entry.type} entries are not supported`,
        { mode: entry.mode, type: entry.type },
      );
    if (entry.mode !== "100644" && entry.mode !== "100755" && entry.mode !== "120000")
      throw entryRefusal(origin, "unsupported-entry", raw, `mode ${entry.mode} is not a file or a symlink`, {
        mode: entry.mode,
      });
    const path = entryPath(raw, null, origin, limits);
    if (path === null || path !== raw)
      throw entryRefusal(origin, "unsupported-entry", raw, "the name is not a normalised relative path");
    order.push({ path, raw, entry });
  }
  if (order.length === 0) return;

  const child = spawnGit(repo, ["cat-file", "--batch"]);
  const stderr = collectStderr(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolvePromise, reject) => {
    child.on("error", (error) => reject(gitUnavailable(error)));
    child.on("close", (code, signal) => resolvePromise({ code, signal }));
  });
  // git exiting early closes its stdin; its exit code, not EPIPE, says what went wrong.
  child.stdin.on("error", () => undefined);
  child.stdin.end(order.map(({ entry }) => `${entry.oid}\n`).join(""));
  try {
    await readBatch(child.stdout, order, writer, origin);
  } catch (error) {
    writer.closeAll();
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    const exit = await exited.catch(() => null);
    if (exit && exit.code !== 0 && exit.code !== null)
      throw gitFailed(
        repo,
        `git cat-file of commit ${tree.commit} failed`,
        { ...exit, stderr: stderr() },
        "invalid-input",
        { commit: tree.commit },
      );
    throw error;
  }
  const exit = await exited;
  if (exit.code !== 0)
    throw gitFailed(
      repo,
      `git cat-file of commit ${tree.commit} failed`,
      { ...exit, stderr: stderr() },
      "invalid-input",
      { commit: tree.commit },
    );
}

const OBJECT_ID = /^[0-9a-f]{40}$|^[0-9a-f]{64}$/;

interface Body {
  readonly item: { path: string; raw: string; entry: TreeEntry };
  remaining: number;
  readonly hash: ReturnType<typeof createHash>;
  readonly sink: FileSink | null;
  readonly link: Buffer[];
}

/** Parse `cat-file --batch` output (`<oid> <type> <size>\n<bytes>\n` per object, in request order) into the writer. */
async function readBatch(
  stdout: NodeJS.ReadableStream,
  order: ReadonlyArray<Body["item"]>,
  writer: TreeWriter,
  origin: string,
): Promise<void> {
  const broken = (why: string, raw: string | null = null) =>
    entryRefusal(origin, "corrupt-archive", raw, `unexpected git cat-file output: ${why}`);
  let next = 0;
  let pending: Buffer = Buffer.alloc(0);
  let body: Body | null = null;
  const start = (header: string): Body => {
    const item = order[next];
    if (item === undefined) throw broken("more objects than were asked for");
    const [oid = "", type = "", sizeText = ""] = header.split(" ");
    if (oid !== item.entry.oid || type !== "blob" || !/^[0-9]+$/.test(sizeText)) {
      throw entryRefusal(
        origin,
        "unsupported-entry",
        item.raw,
        `the object database has no blob ${item.entry.oid} (git says ${JSON.stringify(header.slice(0, 200))})`,
        { oid: item.entry.oid, reason: "object-missing" },
      );
    }
    const size = Number(sizeText);
    const isLink = item.entry.mode === "120000";
    if (isLink && size > MAX_LINK_BYTES)
      throw entryRefusal(
        origin,
        "unsupported-entry",
        item.raw,
        `symlink text of ${size} bytes is longer than ${MAX_LINK_BYTES}`,
      );
    const sink = isLink ? null : writer.file(item.path, size, item.entry.mode === "100755", item.raw);
    return { item, remaining: size, hash: blobHasher(oid, size), sink, link: [] };
  };
  const end = (done: Body) => {
    const actual = done.hash.digest("hex");
    if (actual !== done.item.entry.oid) {
      done.sink?.close();
      throw new OatsError(
        "integrity-mismatch",
        `${origin}: blob ${done.item.entry.oid} at ` +
          `${JSON.stringify(done.item.raw)} hashes to ${actual}: the object ` +
          `database is damaged; nothing was retained`,
        {
          archive: origin,
          entry: done.item.raw,
          expected: done.item.entry.oid,
          actual,
          reason: "object-differs-from-id",
        },
      );
    }
    if (done.sink) {
      done.sink.finish();
    } else {
      const bytes = Buffer.concat(done.link);
      const text = bytes.toString("utf8");
      if (!Buffer.from(text, "utf8").equals(bytes))
        throw entryRefusal(origin, "unsupported-entry", done.item.raw, "the symlink text is not valid UTF-8");
      writer.symlink(done.item.path, text);
    }
    next += 1;
  };
  for await (const chunk of stdout) {
    let data: Buffer = pending.length > 0 ? Buffer.concat([pending, chunk as Buffer]) : (chunk as Buffer);
    pending = Buffer.alloc(0);
    while (data.length > 0) {
      if (body === null) {
        const newline = data.indexOf(10);
        if (newline < 0) {
          if (data.length > 256) throw broken("a header line without an end");
          pending = data;
          break;
        }
        body = start(data.subarray(0, newline).toString("latin1"));
        data = data.subarray(newline + 1);
      } else if (body.remaining > 0) {
        const piece = data.subarray(0, body.remaining);
        data = data.subarray(piece.length);
        body.remaining -= piece.length;
        body.hash.update(piece);
        if (body.sink) body.sink.write(piece);
        else body.link.push(piece);
      } else {
        if (data[0] !== 10) throw broken("an object not followed by a newline", body.item.raw);
        data = data.subarray(1);
        end(body);
        body = null;
      }
    }
  }
  if (body !== null || pending.length > 0 || next !== order.length) throw broken("the output ended early");
}

/** The git object id of a blob with these bytes, in the repository's hash (by the length of its ids). */
function blobHasher(oid: string, size: number) {
  const hash = createHash(oid.length === 64 ? "sha256" : "sha1");
  hash.update(`blob ${size}\0`);
  return hash;
}
