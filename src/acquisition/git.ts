import { lstat, realpath } from "node:fs/promises";
import { OatsError, errnoCode } from "../core/index.js";

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
 *   git 2.39 accepts `--end-of-options` in rev-parse, cat-file and ls-tree
 *   (parse_options commands); after it, `--output=x` is an object name.
 *   `cat-file --batch` takes its object ids on stdin, one checked id a line.
 * - The repository is the directory given, not one found above it: a
 *   subdirectory of a work tree is refused (the caller named a directory,
 *   not the repository it sits in).
 * - The tree is read from the object database only: `ls-tree -r -z
 *   --full-tree` lists it, `cat-file --batch` hands over each blob's raw
 *   bytes, and writeCommitTree (git-tree.ts) writes them through the extractor's
 *   TreeWriter. Nothing that consults `.gitattributes` runs (no archive, no
 *   checkout), so no `filter.<x>.smudge`/`clean`/`process`, textconv,
 *   `export-subst` or `export-ignore` of the repository applies, and each
 *   blob is hashed as it is written and must have the id the tree names.
 * - The repository's config is still read by every git command; what in it
 *   could start a program is overridden on the command line (GIT_GLOBAL_ARGS,
 *   see docs/design/acquisition.md for what is and is not covered).
 * - A submodule (gitlink) entry is refused: its content is not in this
 *   repository.
 */

export const FULL_COMMIT_PATTERN = /^[0-9a-f]{40}$/;

/**
 * Refuse anything that is not a full lowercase 40-hex commit id, before it can reach git (`invalid-input`,
 * reason `not-a-full-commit`: refs, abbreviations and options included).
 * @returns the commit id, unchanged
 */
export function assertFullCommit(revision: string): string {
  if (typeof revision === "string" && FULL_COMMIT_PATTERN.test(revision)) return revision;
  throw new OatsError(
    "invalid-input",
    `revision ` +
      `${JSON.stringify(typeof revision === "string" ? revision.slice(0, 200) : revision)} ` +
      `is not a full commit id: give 40 lowercase hex digits (refs, ` +
      `abbreviations and options are refused before git runs) or "local"`,
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
  env["GIT_NO_LAZY_FETCH"] = "1";
  env["LC_ALL"] = "C";
  return env;
}

/**
 * Options put before every git subcommand. The repository's own config is
 * untrusted; command-line `-c` wins over it. None of the plumbing we run
 * (rev-parse, cat-file, ls-tree) reads the index or a work tree, talks to a
 * remote or runs a hook, but a partial clone's missing object makes git
 * fetch it lazily from the promisor remote, which would run the remote's
 * transport (`remote.<x>.uploadpack`, `core.sshCommand`, `ext::` commands):
 * every transport is forbidden, and GIT_NO_LAZY_FETCH (set in
 * gitEnvironment) turns lazy fetching off where git knows it (2.45+).
 */
export const GIT_GLOBAL_ARGS: readonly string[] = [
  ["core.fsmonitor", "false"],
  ["core.hooksPath", "/dev/null"],
  ["core.sshCommand", "false"],
  ["core.gitProxy", "false"],
  ["core.askPass", "false"],
  ["credential.helper", ""],
  ["protocol.allow", "never"],
  ...["file", "git", "ssh", "http", "https", "ftp", "ftps", "ext", "fd"].map((name) => [
    `protocol.${name}.allow`,
    "never",
  ]),
].flatMap(([key, value]) => ["-c", `${key}=${value}`]);

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

export function gitUnavailable(error: unknown): OatsError {
  return new OatsError("internal-error", `cannot run git: ${error instanceof Error ? error.message : String(error)}`, {
    step: "git",
    reason: "git-unavailable",
    ...(errnoCode(error) ? { errno: errnoCode(error) } : {}),
  });
}

export function spawnGit(repo: string, args: readonly string[]) {
  // Loaded when git runs, not with the module: most commands that load this layer never spawn.
  return process.getBuiltinModule("node:child_process").spawn("git", ["-C", repo, ...GIT_GLOBAL_ARGS, ...args], {
    shell: false,
    env: gitEnvironment(),
    stdio: ["pipe", "pipe", "pipe"],
    windowsHide: true,
  });
}

export function collectStderr(child: ReturnType<typeof spawnGit>): () => string {
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
    child.stdin.on("error", () => undefined);
    child.stdin.end();
    const chunks: Buffer[] = [];
    const stderr = collectStderr(child);
    child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
    child.on("error", (error) => reject(gitUnavailable(error)));
    child.on("close", (code, signal) =>
      resolvePromise({ code, signal, stdout: Buffer.concat(chunks), stderr: stderr() }),
    );
  });
}

export function gitFailed(
  repo: string,
  what: string,
  run: Pick<GitRun, "code" | "signal" | "stderr">,
  code: "invalid-input" | "artifact-not-found" = "invalid-input",
  details: Record<string, unknown> = {},
): OatsError {
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
    throw new OatsError("invalid-input", `source does not exist: ${dir}`, {
      source: dir,
      errno: errnoCode(error),
      reason: "source-missing",
    });
  }
  if (!(await lstat(root)).isDirectory())
    throw new OatsError("invalid-input", `source is not a directory: ${dir}`, {
      source: dir,
      reason: "not-a-directory",
    });
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
    throw new OatsError(
      "invalid-input",
      `${dir} is inside the git repository at ${realTop}, not its top: give the repository itself`,
      {
        source: dir,
        repository: realTop,
        reason: "not-repository-root",
      },
    );
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
    throw gitFailed(repo, `commit ${commit} is not in this repository`, type, "artifact-not-found", {
      commit,
      reason: "commit-not-found",
    });
  }
  const objectType = type.stdout.toString("utf8").trim();
  if (objectType !== "commit") {
    throw new OatsError("invalid-input", `${repo}: ${commit} is a ${objectType}, not a commit`, {
      repository: repo,
      commit,
      type: objectType,
      reason: "not-a-commit",
    });
  }
  const tree = await runGit(repo, ["rev-parse", "--verify", "--end-of-options", `${commit}^{tree}`]);
  const treeId = tree.stdout.toString("utf8").trim();
  if (tree.code !== 0 || !/^[0-9a-f]{40}$|^[0-9a-f]{64}$/.test(treeId))
    throw gitFailed(repo, `cannot read the tree of commit ${commit}`, tree, "invalid-input", { commit });
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
  if (run.code !== 0)
    throw gitFailed(repo, `cannot list the tree of commit ${tree.commit}`, run, "invalid-input", {
      commit: tree.commit,
    });
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
      throw new OatsError("invalid-artifact", `${repo}: commit ${tree.commit} has a path that is not valid UTF-8`, {
        repository: repo,
        commit: tree.commit,
        path,
        reason: "non-utf8-name",
      });
    }
    if (type === "commit" || mode === "160000") {
      throw new OatsError(
        "invalid-artifact",
        `${repo}: commit ${tree.commit} has a submodule at ` +
          `${JSON.stringify(path)}; its content is not in this repository, so the ` +
          `commit's tree cannot be retained whole`,
        {
          repository: repo,
          commit: tree.commit,
          path,
          submoduleCommit: oid,
          reason: "submodule",
        },
      );
    }
    entries.set(path, { mode, type, oid });
  }
  return entries;
}
