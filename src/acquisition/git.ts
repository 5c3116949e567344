import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, readdir, readlink, realpath } from "node:fs/promises";
import { join } from "node:path";
import { OatsError, errnoCode } from "../errors.js";
import { extractTar, type ExtractLimits } from "./extract.js";

/**
 * The git half of source retention: from a local repository and a full
 * commit id, the tree of that commit, never the working tree.
 *
 * - The commit is checked against /^[0-9a-f]{40}$/ before git sees it: a ref,
 *   an abbreviation or `--upload-pack=...` never reaches a git argv.
 * - git runs without a shell (spawn with an argv array), with every `GIT_*`
 *   variable of our environment removed (GIT_DIR, GIT_WORK_TREE,
 *   GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES,
 *   GIT_CONFIG*, GIT_NAMESPACE, ... would each redirect what git reads), with
 *   replace refs ignored (GIT_NO_REPLACE_OBJECTS=1: `git replace` could swap
 *   the commit's tree) and `--end-of-options` before every revision argument.
 *   git 2.39 accepts `--end-of-options` in rev-parse, cat-file, ls-tree and
 *   archive (all parse_options commands); after it, `--upload-pack=x` is
 *   refused by archive as "not a valid object name".
 * - The repository is the directory given, not one found above it: a
 *   subdirectory of a work tree is refused (git archive run there would
 *   archive only that subdirectory).
 * - `git archive` is given the commit's root tree id, not the commit, so no
 *   `export-subst` placeholder is expanded; whatever it writes is extracted by
 *   extractTar (no prefix) and then compared entry by entry with `git ls-tree
 *   -r` of that tree (mode, blob id): an `export-ignore` attribute or anything
 *   else that would make the archive differ from the commit is refused.
 * - A submodule (gitlink) entry is refused: its content is not in this
 *   repository, and archive would silently write an empty directory.
 */

export const FULL_COMMIT_PATTERN = /^[0-9a-f]{40}$/;

/** Refuse anything that is not a full lowercase 40-hex commit id, before it can reach git. */
export function assertFullCommit(revision: unknown): string {
  if (typeof revision === "string" && FULL_COMMIT_PATTERN.test(revision)) return revision;
  throw new OatsError(
    "invalid-input",
    `revision ${JSON.stringify(typeof revision === "string" ? revision.slice(0, 200) : revision)} is not a full commit id: give 40 lowercase hex digits (refs, abbreviations and options are refused before git runs) or "local"`,
    { revision: typeof revision === "string" ? revision.slice(0, 200) : String(revision), reason: "not-a-full-commit" },
  );
}

/** Our environment without anything that redirects git, plus what makes git read only the repository as it is. */
export function gitEnvironment(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(base)) {
    if (name.toUpperCase().startsWith("GIT_")) continue;
    env[name] = value;
  }
  env["GIT_NO_REPLACE_OBJECTS"] = "1";
  env["GIT_TERMINAL_PROMPT"] = "0";
  env["LC_ALL"] = "C";
  return env;
}

/** Options put before every git subcommand: no fsmonitor hook is ever started on the user's behalf. */
const GIT_GLOBAL_ARGS = ["-c", "core.fsmonitor=false"];

interface GitRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: Buffer;
  readonly stderr: string;
}

const STDERR_LIMIT = 64 * 1024;

function firstLine(stderr: string): string {
  return (
    stderr
      .split("\n")
      .map((line) => line.trim())
      .find((line) => line !== "") ?? ""
  );
}

function gitUnavailable(error: unknown): OatsError {
  return new OatsError("internal-error", `cannot run git: ${error instanceof Error ? error.message : String(error)}`, {
    step: "git",
    reason: "git-unavailable",
    ...(errnoCode(error) ? { errno: errnoCode(error) } : {}),
  });
}

function spawnGit(repo: string, args: readonly string[]) {
  return spawn("git", ["-C", repo, ...GIT_GLOBAL_ARGS, ...args], {
    shell: false,
    env: gitEnvironment(),
    stdio: ["ignore", "pipe", "pipe"],
    windowsHide: true,
  });
}

function collectStderr(child: ReturnType<typeof spawnGit>): () => string {
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => {
    if (stderr.length < STDERR_LIMIT) stderr += chunk.slice(0, STDERR_LIMIT - stderr.length);
  });
  return () => stderr;
}

/** Run git to completion, buffering its output. */
function runGit(repo: string, args: readonly string[]): Promise<GitRun> {
  return new Promise((resolvePromise, reject) => {
    const child = spawnGit(repo, args);
    const chunks: Buffer[] = [];
    const stderr = collectStderr(child);
    child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
    child.on("error", (error) => reject(gitUnavailable(error)));
    child.on("close", (code, signal) => resolvePromise({ code, signal, stdout: Buffer.concat(chunks), stderr: stderr() }));
  });
}

function gitFailed(repo: string, what: string, run: Pick<GitRun, "code" | "signal" | "stderr">, code: "invalid-input" | "artifact-not-found" = "invalid-input", details: Record<string, unknown> = {}): OatsError {
  const line = firstLine(run.stderr);
  return new OatsError(code, `${repo}: ${what}${line ? `: ${line}` : ""}`, {
    repository: repo,
    reason: "git-failed",
    exitCode: run.code,
    ...(run.signal ? { signal: run.signal } : {}),
    stderr: line,
    ...details,
  });
}

/**
 * The repository's root, refusing a directory that is not one. Accepted: the
 * top of a work tree, or a git directory itself (a bare repository, `.git`).
 */
export async function gitRepositoryRoot(dir: string): Promise<string> {
  let root: string;
  try {
    root = await realpath(dir);
  } catch (error) {
    throw new OatsError("invalid-input", `source does not exist: ${dir}`, { source: dir, errno: errnoCode(error), reason: "source-missing" });
  }
  if (!(await lstat(root)).isDirectory()) throw new OatsError("invalid-input", `source is not a directory: ${dir}`, { source: dir, reason: "not-a-directory" });
  const probe = await runGit(root, ["rev-parse", "--absolute-git-dir", "--is-inside-work-tree"]);
  if (probe.code !== 0) {
    const line = firstLine(probe.stderr);
    throw new OatsError("invalid-input", `${dir} is not a git repository${line ? `: ${line}` : ""}`, {
      source: dir,
      reason: "not-a-git-repository",
      exitCode: probe.code,
      stderr: line,
    });
  }
  const [gitDir = "", insideWorkTree = ""] = probe.stdout.toString("utf8").split("\n");
  let top: string;
  if (insideWorkTree === "true") {
    const shown = await runGit(root, ["rev-parse", "--show-toplevel"]);
    if (shown.code !== 0) throw gitFailed(root, "cannot find the top of the work tree", shown);
    top = shown.stdout.toString("utf8").replace(/\n$/, "");
  } else {
    top = gitDir;
  }
  const realTop = await realpath(top).catch(() => top);
  if (realTop !== root) {
    throw new OatsError("invalid-input", `${dir} is inside the git repository at ${realTop}, not its top: give the repository itself`, {
      source: dir,
      repository: realTop,
      reason: "not-repository-root",
    });
  }
  return root;
}

export interface CommitTree {
  readonly commit: string;
  /** The commit's root tree id. */
  readonly tree: string;
}

/** Check that the commit exists in the repository and is a commit; return its root tree. */
export async function resolveCommit(repo: string, revision: string): Promise<CommitTree> {
  const commit = assertFullCommit(revision);
  const type = await runGit(repo, ["cat-file", "-t", "--end-of-options", commit]);
  if (type.code !== 0) {
    throw gitFailed(repo, `commit ${commit} is not in this repository`, type, "artifact-not-found", { commit, reason: "commit-not-found" });
  }
  const objectType = type.stdout.toString("utf8").trim();
  if (objectType !== "commit") {
    throw new OatsError("invalid-input", `${repo}: ${commit} is a ${objectType}, not a commit`, { repository: repo, commit, type: objectType, reason: "not-a-commit" });
  }
  const tree = await runGit(repo, ["rev-parse", "--verify", "--end-of-options", `${commit}^{tree}`]);
  const treeId = tree.stdout.toString("utf8").trim();
  if (tree.code !== 0 || !/^[0-9a-f]{40}$|^[0-9a-f]{64}$/.test(treeId)) throw gitFailed(repo, `cannot read the tree of commit ${commit}`, tree, "invalid-input", { commit });
  return { commit, tree: treeId };
}

export interface TreeEntry {
  readonly mode: string;
  readonly type: string;
  readonly oid: string;
}

/** Every file, symlink and gitlink of a tree (`git ls-tree -r -z --full-tree`), by path. */
export async function listTree(repo: string, tree: CommitTree): Promise<Map<string, TreeEntry>> {
  const run = await runGit(repo, ["ls-tree", "-r", "-z", "--full-tree", "--end-of-options", tree.tree]);
  if (run.code !== 0) throw gitFailed(repo, `cannot list the tree of commit ${tree.commit}`, run, "invalid-input", { commit: tree.commit });
  const entries = new Map<string, TreeEntry>();
  let start = 0;
  const out = run.stdout;
  while (start < out.length) {
    let end = out.indexOf(0, start);
    if (end < 0) end = out.length;
    const record = out.subarray(start, end);
    start = end + 1;
    const tab = record.indexOf(9);
    const [mode = "", type = "", oid = ""] = record.subarray(0, tab).toString("latin1").split(" ");
    const rawPath = record.subarray(tab + 1);
    const path = rawPath.toString("utf8");
    if (tab < 0 || !Buffer.from(path, "utf8").equals(rawPath)) {
      throw new OatsError("invalid-artifact", `${repo}: commit ${tree.commit} has a path that is not valid UTF-8`, { repository: repo, commit: tree.commit, path, reason: "non-utf8-name" });
    }
    if (type === "commit" || mode === "160000") {
      throw new OatsError("invalid-artifact", `${repo}: commit ${tree.commit} has a submodule at ${JSON.stringify(path)}; its content is not in this repository, so the commit's tree cannot be retained whole`, {
        repository: repo,
        commit: tree.commit,
        path,
        submoduleCommit: oid,
        reason: "submodule",
      });
    }
    entries.set(path, { mode, type, oid });
  }
  return entries;
}

export interface ArchiveOptions {
  readonly limits?: Partial<ExtractLimits>;
}

/** Stream `git archive` of the commit's tree into `dest` through the safe extractor. */
export async function archiveCommitTree(repo: string, tree: CommitTree, dest: string, options: ArchiveOptions = {}): Promise<void> {
  const child = spawnGit(repo, ["archive", "--format=tar", "--end-of-options", tree.tree]);
  const stderr = collectStderr(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolvePromise, reject) => {
    child.on("error", (error) => reject(gitUnavailable(error)));
    child.on("close", (code, signal) => resolvePromise({ code, signal }));
  });
  const extracted = extractTar(child.stdout, dest, { origin: `git archive ${tree.commit} (${repo})`, prefix: null, ...(options.limits ? { limits: options.limits } : {}) });
  const [extract, exit] = await Promise.allSettled([extracted, exited.finally(() => undefined)]);
  if (extract.status === "rejected") {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited.catch(() => undefined);
    // git itself failing truncates the stream; its own message says more than a corrupt-archive refusal.
    if (exit.status === "fulfilled" && exit.value.code !== 0 && exit.value.code !== null) {
      throw gitFailed(repo, `git archive of commit ${tree.commit} failed`, { ...exit.value, stderr: stderr() }, "invalid-input", { commit: tree.commit });
    }
    throw extract.reason;
  }
  if (exit.status === "rejected") throw exit.reason;
  if (exit.value.code !== 0) throw gitFailed(repo, `git archive of commit ${tree.commit} failed`, { ...exit.value, stderr: stderr() }, "invalid-input", { commit: tree.commit });
}

/** The git object id of a blob with these bytes, in the repository's hash (by the length of its ids). */
function blobHasher(oid: string, size: number) {
  const hash = createHash(oid.length === 64 ? "sha256" : "sha1");
  hash.update(`blob ${size}\0`);
  return hash;
}

async function fileBlobId(path: string, size: number, like: string): Promise<string> {
  const hash = blobHasher(like, size);
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/**
 * Compare an extracted tree with the commit's listing: the same files and
 * symlinks, each with the same exec bit and blob id, nothing more or less.
 */
export async function checkAgainstTree(repo: string, tree: CommitTree, expected: ReadonlyMap<string, TreeEntry>, dir: string): Promise<void> {
  const seen = new Set<string>();
  const differs = (path: string, what: string, details: Record<string, unknown> = {}) =>
    new OatsError("invalid-artifact", `${repo}: git archive of commit ${tree.commit} differs from the commit's tree at ${JSON.stringify(path)}: ${what} (an export-ignore or export-subst attribute?); nothing was retained`, {
      repository: repo,
      commit: tree.commit,
      path,
      reason: "archive-differs-from-commit",
      ...details,
    });
  const walk = async (absolute: string, relative: string): Promise<void> => {
    for (const entry of await readdir(absolute, { withFileTypes: true })) {
      const path = relative ? `${relative}/${entry.name}` : entry.name;
      const full = join(absolute, entry.name);
      const stats = await lstat(full);
      if (stats.isDirectory()) {
        await walk(full, path);
        continue;
      }
      const want = expected.get(path);
      if (!want) throw differs(path, "the archive has an entry the commit does not");
      seen.add(path);
      if (stats.isSymbolicLink()) {
        if (want.mode !== "120000") throw differs(path, `a symlink in the archive, mode ${want.mode} in the commit`);
        const text = Buffer.from(await readlink(full, { encoding: "buffer" }));
        const oid = blobHasher(want.oid, text.length).update(text).digest("hex");
        if (oid !== want.oid) throw differs(path, "the link text differs", { expected: want.oid, actual: oid });
        continue;
      }
      if (!stats.isFile() || !want.mode.startsWith("100")) throw differs(path, `a ${stats.isFile() ? "file" : "special entry"} in the archive, mode ${want.mode} in the commit`);
      const wantExec = (Number.parseInt(want.mode, 8) & 0o100) !== 0;
      if (((stats.mode & 0o100) !== 0) !== wantExec) throw differs(path, "the owner-exec bit differs", { expectedMode: want.mode });
      const oid = await fileBlobId(full, stats.size, want.oid);
      if (oid !== want.oid) throw differs(path, "the content differs", { expected: want.oid, actual: oid });
    }
  };
  await walk(dir, "");
  for (const path of expected.keys()) if (!seen.has(path)) throw differs(path, "the commit has an entry the archive does not");
}
