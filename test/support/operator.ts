/**
 * An operator who is not root: the tests run as root, which ignores
 * permission bits, so a store's read-only trees (0555 directories, 0444
 * files) never get in a root process's way. These run the built CLI
 * (dist/; `npm run build` first) as `nobody` (uid/gid 65534) on a scope that
 * nobody owns, where the bits hold.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { REPO, tempDir } from "../helpers.js";

export const NOBODY = 65534;

/** Why an operator test cannot run here, or null when it can (as root, with the repository readable by nobody). */
export function operatorSkip(): string | null {
  if (process.getuid?.() !== 0) return "needs root to run the CLI as nobody (uid 65534)";
  if ((statSync(REPO).mode & 0o005) !== 0o005) return `${REPO} must be readable by nobody`;
  return null;
}

/** A directory nobody owns (0755), holding the scope `scope` (empty, nobody's) the operator's CLI runs on. */
export function operatorHome(): { home: string; scope: string } {
  const home = tempDir("oats-operator-");
  const scope = join(home, "scope");
  mkdirSync(scope);
  for (const dir of [home, scope]) {
    chmodSync(dir, 0o755);
    chownSync(dir, NOBODY, NOBODY);
  }
  return { home, scope };
}

/** Give `path` (and everything under it) to nobody. */
export function giveToNobody(path: string): void {
  const result = spawnSync("chown", ["-R", `${NOBODY}:${NOBODY}`, path], { encoding: "utf8" });
  if (result.status !== 0) throw new Error(`chown ${path}: ${result.stderr}`);
}

/** `oats --json --scope <home>/scope ...args` as nobody: the exit status, stderr and the envelope. */
export function asOperator(home: string, args: string[]) {
  const run = spawnSync(
    process.execPath,
    [join(REPO, "dist/cli/bin.js"), "--json", "--scope", join(home, "scope"), ...args],
    {
      cwd: home,
      uid: NOBODY,
      gid: NOBODY,
      env: { PATH: process.env["PATH"], HOME: home, OATS_STATE_DIR: join(home, "state") },
      encoding: "utf8",
    },
  );
  const line = run.stdout.trim().split("\n").at(-1) ?? "";
  let envelope: { ok: boolean; result: Record<string, any>; error?: Record<string, any> };
  try {
    envelope = JSON.parse(line);
  } catch {
    envelope = { ok: false, result: {}, error: { code: "no-envelope", message: run.stdout } };
  }
  return { status: run.status, stderr: run.stderr, stdout: run.stdout, envelope };
}
