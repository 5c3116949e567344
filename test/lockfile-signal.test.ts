/**
 * A program that imports the library and writes past its file size limit
 * (RLIMIT_FSIZE, set for real with prlimit) gets oats' refusal, not death
 * by SIGXFSZ: proper-lockfile's signal-exit, loaded by the first lock,
 * would otherwise raise the signal again with its default action
 * (src/retention/store/lockfile.ts). The child runs the built library.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { REPO, tempDir } from "./helpers.js";
import { canLimitFileSize } from "./support/prlimit.js";

test(
  "Given a program that has taken a store lock and then retains a file " +
    "larger than its file size limit, Then it gets the library's refusal " +
    "(its OatsError, errno EFBIG) and goes on, instead of being killed by " +
    "SIGXFSZ; nothing of the big tree is published",
  (t) => {
    if (!canLimitFileSize(t, "the child")) return;
    const dir = tempDir("oats-fsize-");
    const small = join(dir, "small");
    const big = join(dir, "big");
    const scope = join(dir, "scope");
    mkdirSync(small);
    mkdirSync(big);
    mkdirSync(scope);
    writeFileSync(join(small, "a.txt"), "small\n");
    writeFileSync(join(big, "blob.bin"), Buffer.alloc(2 << 20, 7));
    const script = join(dir, "child.mjs");
    writeFileSync(
      script,
      [
        `const { retainTree } = await import(${JSON.stringify(pathToFileURL(join(REPO, "dist/index.js")).href)});`,
        // The first retain takes the publish lock, which loads signal-exit.
        `const first = await retainTree(${JSON.stringify(scope)}, { kind: ` +
          `"capture", key: "small", source: ${JSON.stringify(small)} });`,
        `let refusal = null;`,
        `try { await retainTree(${JSON.stringify(scope)}, { kind: "capture", ` +
          `key: "big", source: ${JSON.stringify(big)} }); }`,
        `catch (error) { refusal = { code: error.code, kind: error.kind, errno: ` +
          `error.details?.errno ?? error.details?.code ?? null }; }`,
        `console.log(JSON.stringify({ first: first.status, refusal, after: "went on" }));`,
      ].join("\n"),
    );
    const child = spawnSync("prlimit", [`--fsize=${1 << 20}`, process.execPath, script], { encoding: "utf8" });
    assert.equal(child.signal, null, `killed by ${child.signal}: stderr ${child.stderr.slice(-2000)}`);
    assert.equal(child.status, 0, child.stderr.slice(-2000));
    const report = JSON.parse(child.stdout.trim().split("\n").pop()!) as {
      first: string;
      refusal: { code: string; kind: string; errno: string | null } | null;
      after: string;
    };
    assert.equal(report.first, "retained");
    assert.ok(report.refusal, "the big retain is refused");
    // The copy's failed write, as the library reports any I/O failure of a step: its OatsError, with the errno.
    assert.equal(typeof report.refusal.code, "string", JSON.stringify(report.refusal));
    assert.equal(report.refusal.errno, "EFBIG", JSON.stringify(report.refusal));
    assert.equal(report.after, "went on");
    // The refusal cleaned up after itself: no revision and no staging of the big tree anywhere in the store.
    const left = (readdirSync(join(scope, ".agents"), { recursive: true }) as string[]).filter(
      (path) => path.includes("big") || path.includes(".staging-"),
    );
    assert.deepEqual(
      left.filter((path) => /sha256-|\.staging-/.test(path)),
      [],
      left.join(", "),
    );
  },
);
