/**
 * The benchmark's data sets: how each is generated, deterministically (the
 * same bytes on every machine, incompressible), from a seed and a label.
 * lib.mjs's dataset() generates one on first use and stamps it. Also the
 * resolution record the resolution rows (7a-7c) and bench/probes read.
 */
import { createCipheriv, createHash } from "node:crypto";
import { chmodSync, closeSync, mkdirSync, openSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";

const MiB = 1 << 20;
const GiB = 1 << 30;

export const DATA_VERSION = 1;

/** Deterministic incompressible bytes: the AES-256-CTR keystream under a key derived from `label`. */
export function keystream(label) {
  const key = createHash("sha256").update(`oats-bench:${label}`).digest();
  const cipher = createCipheriv("aes-256-ctr", key, Buffer.alloc(16));
  const zeros = Buffer.alloc(8 * MiB);
  return (length) => {
    const parts = [];
    let left = length;
    while (left > 0) {
      const n = Math.min(left, zeros.length);
      parts.push(cipher.update(zeros.subarray(0, n)));
      left -= n;
    }
    return parts.length === 1 ? parts[0] : Buffer.concat(parts);
  };
}

/** mulberry32: a small seeded PRNG for sizes and layout. */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function writeBigFile(path, size, label) {
  const next = keystream(label);
  const fd = openSync(path, "w", 0o644);
  try {
    for (let done = 0; done < size; ) {
      const chunk = next(Math.min(8 * MiB, size - done));
      let written = 0;
      while (written < chunk.length) written += writeSync(fd, chunk, written);
      done += chunk.length;
    }
  } finally {
    closeSync(fd);
  }
}

// 10 + 10*34 = 350 directories
export const SMALL = { files: 20_000, top: 10, perTop: 34, minSize: 100, maxSize: 4096 };
export const CAPS = { capabilities: 50, files: 200, dirs: 8, minSize: 100, maxSize: 4096 };
export const CAPTURE = { files: 2000, dirs: 20, minSize: 100, maxSize: 4096 };
export const TARBALL = { files: 5000, dirs: 50, size: 10_000 }; // ~50 MB of incompressible content

export const DATASETS = {
  big: {
    describe: "8 files x 128 MiB",
    generate(dir) {
      for (let i = 0; i < 8; i++) writeBigFile(join(dir, `blob-${i}.bin`), 128 * MiB, `big-${i}`);
    },
  },
  small: {
    describe: "20,000 files of 100-4096 bytes in 350 directories",
    generate(dir) {
      const random = prng(20_000);
      const next = keystream("small");
      const dirs = [];
      for (let t = 0; t < SMALL.top; t++) {
        const top = join(dir, `pkg-${String(t).padStart(2, "0")}`);
        mkdirSync(top);
        dirs.push(top);
        for (let s = 0; s < SMALL.perTop; s++) {
          const sub = join(top, `mod-${String(s).padStart(2, "0")}`);
          mkdirSync(sub);
          dirs.push(sub);
        }
      }
      for (let i = 0; i < SMALL.files; i++) {
        const where = dirs[i % dirs.length];
        const size = SMALL.minSize + Math.floor(random() * (SMALL.maxSize - SMALL.minSize + 1));
        const path = join(where, `file-${String(i).padStart(5, "0")}.${["js", "json", "md", "ts"][i % 4]}`);
        writeFileSync(path, next(size));
        chmodSync(path, i % 10 === 0 ? 0o755 : 0o644);
      }
    },
  },
  caps: {
    describe: `${CAPS.capabilities} capability trees of ${CAPS.files} files each`,
    generate(dir) {
      for (let c = 0; c < CAPS.capabilities; c++) {
        const name = `cap-${String(c).padStart(2, "0")}`;
        const random = prng(1000 + c);
        const next = keystream(`caps-${c}`);
        const root = join(dir, name);
        const dirs = ["bin", ...Array.from({ length: CAPS.dirs - 1 }, (_, d) => `lib/mod-${d}`)].map((sub) =>
          join(root, sub),
        );
        for (const sub of dirs) mkdirSync(sub, { recursive: true });
        writeFileSync(join(root, "bin", "run.mjs"), `#!/usr/bin/env node\nconsole.log(${JSON.stringify(name)});\n`);
        chmodSync(join(root, "bin", "run.mjs"), 0o755);
        for (let i = 1; i < CAPS.files; i++) {
          const size = CAPS.minSize + Math.floor(random() * (CAPS.maxSize - CAPS.minSize + 1));
          writeFileSync(join(dirs[i % dirs.length], `file-${String(i).padStart(3, "0")}.js`), next(size));
        }
      }
    },
  },
  capture: {
    describe: `one capture tree of ${CAPTURE.files} files`,
    generate(dir) {
      const random = prng(2000);
      const next = keystream("capture");
      const dirs = [
        "bin",
        ...Array.from({ length: CAPTURE.dirs - 1 }, (_, d) => `lib/mod-${String(d).padStart(2, "0")}`),
      ].map((sub) => join(dir, sub));
      for (const sub of dirs) mkdirSync(sub, { recursive: true });
      writeFileSync(join(dir, "bin", "run"), "#!/bin/sh\necho captured\n");
      chmodSync(join(dir, "bin", "run"), 0o755);
      for (let i = 1; i < CAPTURE.files; i++) {
        const size = CAPTURE.minSize + Math.floor(random() * (CAPTURE.maxSize - CAPTURE.minSize + 1));
        writeFileSync(join(dirs[i % dirs.length], `file-${String(i).padStart(4, "0")}.js`), next(size));
      }
    },
  },
  tarball: {
    describe: `a package/ tree of ${TARBALL.files} files of ${TARBALL.size} bytes`,
    generate(dir) {
      const next = keystream("tarball");
      const root = join(dir, "package");
      const dirs = [
        "bin",
        ...Array.from({ length: TARBALL.dirs - 1 }, (_, d) => `lib/mod-${String(d).padStart(2, "0")}`),
      ].map((sub) => join(root, sub));
      for (const sub of dirs) mkdirSync(sub, { recursive: true });
      for (let i = 0; i < TARBALL.files; i++) {
        const path = join(dirs[i % dirs.length], `file-${String(i).padStart(4, "0")}.js`);
        writeFileSync(path, next(TARBALL.size));
        chmodSync(path, i % 50 === 0 ? 0o755 : 0o644);
      }
    },
  },
  huge: {
    describe: "one 2 GiB file",
    generate(dir) {
      writeBigFile(join(dir, "huge.bin"), 2 * GiB, "huge");
    },
  },
};

/**
 * A complete instance record selecting every capability of `caps`, one entry
 * point into each, and `configEntries` config choices (their size is what
 * makes a record large; they reference no artifact).
 */
export function benchRecord(refs, configEntries) {
  const artifacts = {};
  const entrypoints = {};
  for (const ref of refs) {
    artifacts[ref.key] = {
      artifact: ref,
      package: { id: ref.key, source: `path:/bench/${ref.key}`, version: "1.0.0", commit: null, integrity: null },
      legacyIntegrity: null,
    };
    entrypoints[`${ref.key}.run`] = { artifact: ref, path: "bin/run.mjs", args: ["--bench"], role: "command" };
  }
  const config = {};
  for (let i = 0; i < configEntries; i++) {
    const capability = refs[i % refs.length].key;
    config[`/settings/${capability}/option-${String(i).padStart(4, "0")}`] = {
      value: { enabled: i % 2 === 0, level: i % 7, label: `setting number ${i} of ${capability}` },
      origin: { kind: i % 3 === 0 ? "soul-default" : "operator", ref: "bench/plan.yaml" },
      constraints:
        i % 5 === 0
          ? [{ kind: "maximum", value: 10, origin: { kind: "soul-requirement", ref: "bench/soul.yaml" } }]
          : [],
      considered: [],
    };
  }
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "bench" },
    source: null,
    artifacts,
    config,
    bindings: {},
    messaging: null,
    entrypoints,
    capture: null,
    evidence: [],
    unresolved: [],
  };
}
