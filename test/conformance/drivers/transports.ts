/**
 * The transports the whole suite runs against. `dir` is a share: a
 * directory on another filesystem than the scope (tmpfs /dev/shm when it is
 * one; the scope lives under the OS temp directory). `oci` is a real CNCF
 * distribution registry on 127.0.0.1 (test/support/registry.ts), one
 * repository per far side. A new transport: add it to TRANSPORTS, and every
 * entry file runs over it (see docs/design/evidence.md, "Conformance suite").
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "../../support/registry.js";
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

const shareBase = otherFilesystem();

export const dirTransport: Transport = {
  name: "dir",
  unavailable:
    shareBase === null
      ? "the dir transport needs a directory on another filesystem than the OS " +
        "temp directory (/dev/shm): none on this host"
      : null,
  async farSide() {
    const dir = mkdtempSync(join(shareBase!, "oats-conf-far-"));
    return { to: `dir:${dir}`, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  },
  async close() {},
};

let registry: Promise<Registry> | null = null;

export const ociTransport: Transport = {
  name: "oci",
  unavailable: registryBinary() === null ? NO_REGISTRY : null,
  async farSide() {
    registry ??= startRegistry();
    const started = await registry;
    // A repository of its own per far side: nothing another property pushed is in it.
    return { to: started.ref(`oats-conf/far-${randomBytes(6).toString("hex")}`), cleanup: async () => {} };
  },
  async close() {
    if (registry !== null) await (await registry).stop();
    registry = null;
  },
};

export const TRANSPORTS: readonly Transport[] = [dirTransport, ociTransport];
