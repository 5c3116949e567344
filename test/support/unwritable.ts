import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Make an audit directory really refuse writes, for the rest of a test:
 * `chmod 0500` does not stop root, so as root a read-only bind mount of the
 * directory over itself; without the privilege to mount, `file` (the log)
 * replaced by a directory, a real EISDIR fault. `probe` throws when the
 * condition holds; `restore` undoes it; `setup` names the means, for the
 * test's diagnostics.
 */
export function makeUnwritable(dir: string, file: string): { setup: string; probe: () => void; restore: () => void } {
  if (process.getuid?.() !== 0) {
    const mode = statSync(dir).mode & 0o7777;
    chmodSync(dir, 0o500);
    return {
      setup: "chmod 0500",
      restore: () => chmodSync(dir, mode),
      probe: () => writeFileSync(join(dir, "probe"), "x"),
    };
  }
  const bind = spawnSync("mount", ["--bind", dir, dir], { encoding: "utf8" });
  const remount =
    bind.status === 0 ? spawnSync("mount", ["-o", "remount,bind,ro", dir, dir], { encoding: "utf8" }) : null;
  if (bind.status === 0 && remount?.status === 0) {
    return {
      setup: "read-only bind mount",
      restore: () => {
        const result = spawnSync("umount", [dir], { encoding: "utf8" });
        assert.equal(result.status, 0, `umount ${dir}: ${result.stderr}`);
      },
      probe: () => writeFileSync(join(dir, "probe"), "x"),
    };
  }
  if (bind.status === 0) spawnSync("umount", [dir]);
  renameSync(file, `${file}.saved`);
  mkdirSync(file);
  return {
    setup: `${file} replaced by a directory`,
    restore: () => {
      rmSync(file, { recursive: true });
      renameSync(`${file}.saved`, file);
    },
    probe: () => writeFileSync(file, "x"),
  };
}
