import { spawnSync } from "node:child_process";
import type { TestContext } from "node:test";

/** Whether a file size limit (RLIMIT_FSIZE) can be set on a child with prlimit; the test is skipped by name when not.
 * */
export function canLimitFileSize(t: TestContext, on: string): boolean {
  if (spawnSync("prlimit", ["--version"]).status === 0) return true;
  t.skip(`SKIPPED by name: prlimit (util-linux) is not installed, so no file size limit can be set on ${on}`);
  return false;
}
