import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { REPO } from "../helpers.js";

/**
 * A tree of many small files: enough work (seconds on a loaded machine)
 * that a Ctrl-C typed once its first progress line appears lands while
 * the files are still being read.
 */
export function makeBigTree(dir: string, directories = 50, filesEach = 100): string {
  for (let d = 0; d < directories; d++) {
    mkdirSync(join(dir, `d${d}`), { recursive: true });
    for (let f = 0; f < filesEach; f++) writeFileSync(join(dir, `d${d}`, `f${f}`), `${d}/${f}\n`.repeat(200));
  }
  return dir;
}

export interface PtyResult {
  readonly status: number | null;
  /** Everything the command wrote to its terminal (stdout and stderr together). */
  readonly output: string;
}

/**
 * Run the built CLI under a real pseudo-terminal (test/support/pty-run.py):
 * stdin, stdout and stderr are the terminal. With `interruptOn`, Ctrl-C is
 * typed (once, or twice in a row) as soon as that text appears.
 */
export function runOatsPty(
  args: string[],
  options: { cols?: number; interruptOn?: string; twice?: boolean } = {},
): Promise<PtyResult> {
  const helper = [join(REPO, "test/support/pty-run.py"), "--cols", String(options.cols ?? 80)];
  if (options.interruptOn !== undefined)
    helper.push(options.twice ? "--interrupt-twice-on" : "--interrupt-on", options.interruptOn);
  const child = spawn("python3", [...helper, "--", process.execPath, join(REPO, "dist/cli/bin.js"), ...args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let output = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => (output += chunk));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, output }));
  });
}
