import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { copyVerifiedTree, removeRunCopy } from "../src/captures/run-copy.js";
import { retainTree } from "../src/index.js";
import { tempDir } from "./helpers.js";

/**
 * A revision's files are hard links to held files other revisions share, so
 * another publisher linking one changes its ctime (not its bytes) while a
 * reader copies it. A run copy taken meanwhile reads again instead of
 * refusing `changed-while-reading`.
 */
test(
  "Given another process that links and unlinks a revision's shared files as fast as it can, When dispatch " +
    "copies the revision 30 times, Then every copy verifies",
  async () => {
    const source = tempDir("oats-readers-src-");
    for (let n = 0; n < 200; n++) writeFileSync(join(source, `f${n}.txt`), `file ${n}\n`.repeat(50));
    const scope = tempDir("oats-readers-scope-");
    const receipt = await retainTree(scope, { kind: "capture", key: "shared", source });
    const held = join(scope, ".agents", "files", "sha256");
    const files = readdirSync(held).flatMap((h2) => readdirSync(join(held, h2)).map((name) => join(held, h2, name)));
    assert.ok(files.length >= 200);
    const spare = join(scope, "spare");
    mkdirSync(spare);
    const linker = spawn(
      process.execPath,
      [
        "-e",
        'const fs = require("node:fs"); const [spare, ...files] = process.argv.slice(1);' +
          ' process.stdout.write("ready\\n"); for (let n = 0; ; n++) { const at = spare + "/l" + n;' +
          " fs.linkSync(files[n % files.length], at); fs.unlinkSync(at); }",
        spare,
        ...files,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    await new Promise<void>((resolve) => linker.stdout!.once("data", () => resolve()));
    try {
      for (let n = 0; n < 30; n++) {
        const copy = await copyVerifiedTree(scope, { kind: "capture", key: "shared", integrity: receipt.integrity });
        await removeRunCopy(copy);
      }
    } finally {
      linker.kill();
    }
  },
);
