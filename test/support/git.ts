import { execFileSync } from "node:child_process";

/** The test's own git: no GIT_* variable of the runner leaks into the fixtures, and no system or global config is
 * read. */
export function gitEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith("GIT_")) env[name] = value;
  return { ...env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null" };
}

/** Run git in `cwd` (never through a shell) and return its trimmed stdout. */
export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", args, { cwd, env: gitEnv(), encoding: "utf8" }).trim();
}

/** A fresh repository on branch main with a committer identity. */
export function initRepository(dir: string): void {
  git(dir, "init", "-q", "-b", "main");
  git(dir, "config", "user.name", "Oats Test");
  git(dir, "config", "user.email", "oats@example.org");
}
