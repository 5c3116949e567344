import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";

const mounted: string[] = [];
const made: string[] = [];

// Unmount before removing: helpers' tempDir cleanup would meet a busy mount point.
after(() => {
  for (const dir of mounted.reverse()) spawnSync("umount", [dir]);
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A temporary directory removed after any mount in it is gone. */
export function shareTempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

/**
 * A share on another filesystem for real: a tmpfs mounted under a fresh
 * temporary directory (mode 0777 when `open`, so another user can write it,
 * as on a shared mount). When mounting is not permitted, a plain directory
 * on the same filesystem, and `mounted` says so: callers then pass
 * allowSameFilesystem and report the skipped detail by name.
 */
export function makeShare(options: { open?: boolean; size?: string } = {}): {
  base: string;
  share: string;
  mounted: boolean;
} {
  const base = shareTempDir("oats-share-");
  // Reachable by another user (nobody) for the attack tests; nothing secret lives here.
  // Like /tmp when open: another user (nobody) may make its own things beside the share.
  chmodSync(base, options.open ? 0o1777 : 0o755);
  const mountPoint = join(base, "mnt");
  mkdirSync(mountPoint);
  const result = spawnSync("mount", [
    "-t",
    "tmpfs",
    "-o",
    `size=${options.size ?? "64m"},mode=${options.open ? "0777" : "0755"}`,
    "tmpfs",
    mountPoint,
  ]);
  if (result.status === 0) {
    mounted.push(mountPoint);
    return { base, share: mountPoint, mounted: true };
  }
  if (options.open) chmodSync(mountPoint, 0o777);
  return { base, share: mountPoint, mounted: false };
}

/** Mount a tmpfs at an existing mount point (the "share comes back" step); false when not permitted. */
export function mountAt(mountPoint: string, size = "64m"): boolean {
  const result = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${size},mode=0755`, "tmpfs", mountPoint]);
  if (result.status === 0) mounted.push(mountPoint);
  return result.status === 0;
}

export const MOUNT_SKIP =
  "mounting a tmpfs is not permitted here: the share is a plain directory " +
  "on the scope's filesystem (allowSameFilesystem)";

/** Run argv as the unprivileged attacker `nobody` (uid/gid 65534). */
export function asNobody(argv: string[]) {
  const [command, ...args] = argv;
  return spawnSync(command!, args, { uid: 65534, gid: 65534, encoding: "utf8" });
}
