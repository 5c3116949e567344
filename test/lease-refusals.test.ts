/**
 * Publish leases (src/retention/store/lease.ts) with real concurrent
 * processes: refused publications that race each other leave the store as
 * they found it (the last lease holder takes the leases directory back,
 * whoever created it), and a publisher whose leases directory is taken back
 * under it makes it again and still holds its lease while it works.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { prepareCapture } from "../src/index.js";
import { OatsError } from "../src/core/errors.js";
import { listLeases, withPublishLeaseSync } from "../src/retention/store/lease.js";
import { REPO, snapshotTree, tempDir } from "./helpers.js";
import { runTogether } from "./support/go.js";

/** A capture spec that is refused once its lease is held: its executable tree does not exist. */
function refusedSpec(): string {
  const home = tempDir("oats-lease-spec-");
  writeFileSync(join(home, "class.yaml"), "schemaVersion: 1\nwings: {}\nrepos: {}\ndefaults: []\nprincipals: {}\n");
  writeFileSync(
    join(home, "spec.yaml"),
    [
      "name: refused",
      "executable: {tree: ./no-such-tool, path: bin/run, args: []}",
      "target: {wing: x}",
      "classification: internal",
      "classificationConfig: ./class.yaml",
      "",
    ].join("\n"),
  );
  return join(home, "spec.yaml");
}

/** Everything in the scope but the audit log, which a refusal appends to. */
function withoutAudit(scope: string): string[] {
  return snapshotTree(scope).filter((row) => !/^. \.agents\/audit(\/| )/.test(row));
}

test(
  "Given 8 processes whose capture prepare is refused, released at once, When they have all ended, Then no " +
    "leases directory is left: the scope differs only by the audit entries of the refusals",
  async () => {
    const spec = refusedSpec();
    const child = join(REPO, "test/support/capture-prepare-child.ts");
    for (let round = 0; round < 3; round++) {
      const scope = tempDir("oats-lease-refusals-");
      // One refusal first, alone: the audit log (and so .agents) exists before the race.
      await assert.rejects(prepareCapture(scope, spec), (error: unknown) => error instanceof OatsError);
      assert.equal(existsSync(join(scope, ".agents", "leases")), false, "a lone refusal takes its lease back");
      const before = withoutAudit(scope);
      const inputs = Array.from({ length: 8 }, () => ({ scope, spec }));
      const results = await runTogether(child, inputs, { cwd: REPO, env: { ...process.env } });
      for (const result of results) {
        assert.equal(result.status, 0, result.stderr);
        const outcome = JSON.parse(result.stdout.trim()) as { ok: boolean; code?: string };
        assert.deepEqual([outcome.ok, outcome.code], [false, "invalid-input"], result.stdout);
      }
      assert.deepEqual(withoutAudit(scope), before, `round ${round}: the refusals changed the store`);
    }
  },
);

// A publisher that created its leases directory empty and its lease afterwards lost this race hundreds of times in
// 2,000 rounds; it now renames a directory that already holds its lease into place (docs/design/lifecycle.md).
test(
  "Given another process that takes the empty leases directory back as fast as it can, When this process " +
    "publishes 2,000 times, Then each time its lease exists while its body runs",
  async () => {
    const scope = tempDir("oats-lease-vanish-");
    mkdirSync(join(scope, ".agents"));
    const leases = join(scope, ".agents", "leases");
    const racer = spawn(
      process.execPath,
      [
        "-e",
        'const fs = require("node:fs"); const at = process.argv[1]; process.stdout.write("ready\\n"); ' +
          "for (const end = Date.now() + 60000; Date.now() < end; ) { try { " +
          'if (fs.readdirSync(at).join() === ".gitignore") { fs.unlinkSync(at + "/.gitignore"); fs.rmdirSync(at); }' +
          " } catch {} }",
        leases,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    await new Promise<void>((resolve) => racer.stdout!.once("data", () => resolve()));
    try {
      let without = 0;
      for (let n = 0; n < 2000; n++) {
        withPublishLeaseSync(scope, () => {
          const mine = listLeases(scope).live.filter((path) => path.includes(`-${process.pid}-`));
          if (mine.length !== 1) without++;
        });
      }
      assert.equal(without, 0, `${without} of 2000 publications ran without their lease`);
    } finally {
      racer.kill();
    }
  },
);
