import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { cleanupStaging, fsck } from "../src/index.js";
import { putBlob } from "../src/retention/store/blobs.js";
import { writeInstanceRef, writeResolution } from "../src/resolution/store.js";
import { hostTag, stagingName } from "../src/retention/store/layout.js";
import { tempDir } from "./helpers.js";

/**
 * Records, instance refs and blobs are published from staged files beside
 * their destination. A crash between staging and link/rename leaves such a
 * file; `oats cleanup` removes it when its publisher is gone, and only then.
 */

function deadPid(): number {
  const pid = Number(
    spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout,
  );
  // The child has exited and been reaped: no process has that pid now.
  assert.throws(() => process.kill(pid, 0), { code: "ESRCH" });
  return pid;
}

const EMPTY_RECORD = {
  schemaVersion: 1,
  kind: "instance",
  status: "complete",
  subject: { instance: "alpha" },
  source: null,
  artifacts: {},
  config: {},
  bindings: {},
  messaging: null,
  entrypoints: {},
  capture: null,
  evidence: [],
  unresolved: [],
};

test(
  "Given staging files left in the record, ref and blob stores, When " +
    "cleanup runs, Then a dead publisher's are removed and a live one's kept",
  async () => {
    const scope = tempDir();
    // Make the three file stores exist through their own publishers.
    await putBlob(scope, Buffer.from("schemaVersion: 1\n"));
    const record = writeResolution(scope, EMPTY_RECORD);
    writeInstanceRef(scope, "alpha", record.id);
    const pid = deadPid();
    const stores = [".agents/resolutions", ".agents/refs/instances", ".agents/blobs"];
    const dead = stores.map((store, index) =>
      join(
        scope,
        store,
        `.staging-${hostTag()}-${pid}-${randomBytes(6).toString("hex")}${[".record", ".ref", ""][index]}`,
      ),
    );
    const live = join(scope, ".agents/blobs", stagingName());
    for (const path of [...dead, live]) writeFileSync(path, "half-published");

    assert.deepEqual((await fsck(scope)).staging.sort(), [...dead, live].sort());
    const report = await cleanupStaging(scope);
    assert.deepEqual(report.removed.sort(), [...dead].sort());
    assert.deepEqual(report.active, [live]);
    for (const path of dead) assert.equal(existsSync(path), false, path);
    assert.equal(existsSync(live), true);
  },
);

test(
  "Given a leases directory that a crashed publisher was building in .agents, When cleanup runs, " +
    "Then it is removed and a live publisher's is kept",
  async () => {
    const scope = tempDir();
    mkdirSync(join(scope, ".agents"));
    const build = (pid: number): string => {
      const staged = join(scope, ".agents", `.staging-${hostTag()}-${pid}-${randomBytes(6).toString("hex")}`);
      mkdirSync(staged);
      writeFileSync(join(staged, ".gitignore"), "*\n");
      writeFileSync(join(staged, `${hostTag()}-${pid}-${randomBytes(6).toString("hex")}.lease`), "{}\n");
      return staged;
    };
    const dead = build(deadPid());
    const live = build(process.pid);
    const report = await cleanupStaging(scope);
    assert.deepEqual(report.removed, [dead]);
    assert.equal(existsSync(dead), false);
    assert.equal(existsSync(live), true);
  },
);
