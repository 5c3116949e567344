/**
 * The transports the whole suite runs against. `dir` is a share: a
 * directory on another filesystem than the scope (tmpfs /dev/shm when it is
 * one; the scope lives under the OS temp directory). OCI joins with issue 12:
 * add a Transport here and to TRANSPORTS, and every driver file runs the
 * suite, teeth check included, over it.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Transport } from "../driver.js";

/** A directory for far sides on another filesystem than tmpdir(), or null when this host has none. */
export function otherFilesystem(): string | null {
  for (const candidate of ["/dev/shm", "/run/shm"]) {
    try {
      if (statSync(candidate).isDirectory() && statSync(candidate).dev !== statSync(tmpdir()).dev) return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

export const dirTransport: Transport = {
  name: "dir",
  async farSide() {
    const base = otherFilesystem();
    if (base === null) throw new Error("the dir transport needs a directory on another filesystem than the OS temp directory (/dev/shm): none on this host");
    const dir = mkdtempSync(join(base, "oats-conf-far-"));
    return { to: `dir:${dir}`, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  },
};

export const TRANSPORTS: readonly Transport[] = [dirTransport];
