import assert from "node:assert/strict";
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { snapshotTree } from "./helpers.js";
import { OatsError } from "../src/core/errors.js";
import { EVIDENCE_FILES, type EvidenceBundle, type EvidenceFileName } from "../src/evidence/transport.js";
import { dirTransport } from "../src/evidence/transport-dir.js";
import { asNobody, makeShare } from "./support/shares.js";
import { refusal } from "./support/refusals.js";

/**
 * The dir: transport on its own: layout, idempotence, a typed refusal for
 * other content at the same run id, and another local user (nobody) who
 * can write the share and plants symlinks to redirect our writes.
 */

function bundle(seed: string, seq = 1): EvidenceBundle & { files: ReadonlyMap<EvidenceFileName, Buffer> } {
  const files = new Map<EvidenceFileName, Buffer>(
    EVIDENCE_FILES.map((name) => [name, Buffer.from(`${name} of ${seed}\n`)]),
  );
  const hex = Buffer.from(seed.padEnd(32, "-")).toString("hex").slice(0, 64);
  return { runId: `sha256-${hex}`, seq, files };
}

function hexOf(b: EvidenceBundle): string {
  return b.runId.slice("sha256-".length);
}

describe("the dir: transport", () => {
  test(
    "Given a bundle, When put, Then " +
      "<share>/runs/<hex>/{record.json,log,audit.jsonl} hold its exact bytes, " +
      "no staging is left, and read-back returns exactly them",
    async () => {
      const { share, mounted } = makeShare();
      const transport = dirTransport(share, { allowSameFilesystem: !mounted });
      const b = bundle("layout");
      await transport.put(b);
      assert.deepEqual(readdirSync(join(share, "runs")), [hexOf(b)]);
      for (const [name, bytes] of b.files) assert.ok(readFileSync(join(share, "runs", hexOf(b), name)).equals(bytes));
      const back = await transport.readBack(b.runId);
      assert.deepEqual([...back!.keys()].sort(), [...EVIDENCE_FILES].sort());
      assert.equal(await transport.readBack(bundle("absent").runId), null);
    },
  );

  test(
    "Given the same run already on the share with the same bytes, When put " +
      "again, Then nothing changes; with other bytes, Then integrity-mismatch " +
      "and the share is byte-for-byte as it was",
    async () => {
      const { share, mounted } = makeShare();
      const transport = dirTransport(share, { allowSameFilesystem: !mounted });
      const b = bundle("same");
      await transport.put(b);
      const before = snapshotTree(share);
      await transport.put(b);
      assert.deepEqual(snapshotTree(share), before);
      const other = { ...b, files: new Map(b.files).set("log", Buffer.from("another log\n")) };
      await assert.rejects(transport.put(other), refusal("integrity-mismatch", "existing-content-differs"));
      assert.deepEqual(snapshotTree(share), before);
      // Same files plus one the run never had: not the same content either.
      writeFileSync(join(share, "runs", hexOf(b), "extra"), "x");
      const withExtra = snapshotTree(share);
      await assert.rejects(
        transport.put(b),
        (error: unknown) =>
          error instanceof OatsError && (error.details["differences"] as string[]).includes("extra: unexpected"),
      );
      assert.deepEqual(snapshotTree(share), withExtra);
    },
  );

  test(
    "Given a share that is missing or a file, When probed, Then unreachable " +
      "(missing / not-a-directory); a share on the scope's filesystem is " +
      "unreachable (same-filesystem) unless allowed",
    async () => {
      const { base, share, mounted } = makeShare();
      assert.deepEqual(await dirTransport(join(base, "absent")).probe(), { state: "unreachable", reason: "missing" });
      writeFileSync(join(base, "file"), "x");
      assert.deepEqual(await dirTransport(join(base, "file")).probe(), {
        state: "unreachable",
        reason: "not-a-directory",
      });
      mkdirSync(join(base, "local"));
      assert.deepEqual(await dirTransport(join(base, "local"), { localPath: base }).probe(), {
        state: "unreachable",
        reason: "same-filesystem",
      });
      assert.deepEqual(
        await dirTransport(join(base, "local"), { localPath: base, allowSameFilesystem: true }).probe(),
        {
          state: "reachable",
          reason: null,
        },
      );
      if (mounted)
        assert.deepEqual(await dirTransport(share, { localPath: base }).probe(), { state: "reachable", reason: null });
    },
  );
});

describe("another user who can write the share (nobody)", () => {
  test(
    "Given nobody replaced runs/ with a symlink to a directory it owns, When " +
      "put, Then invalid-artifact-store (symlink) and nothing lands in " +
      "nobody's directory",
    async () => {
      const { base, share, mounted } = makeShare({ open: true });
      const loot = join(base, "loot");
      assert.equal(asNobody(["mkdir", loot]).status, 0, "nobody can make its own directory");
      const planted = asNobody(["ln", "-s", loot, join(share, "runs")]);
      assert.equal(planted.status, 0, planted.stderr);
      const transport = dirTransport(share, { allowSameFilesystem: !mounted });
      await assert.rejects(transport.put(bundle("redirect")), refusal("invalid-artifact-store", "symlink"));
      assert.deepEqual(readdirSync(loot), []);
      assert.ok(
        lstatSync(join(share, "runs")).isSymbolicLink(),
        "the planted link is left alone, not followed or replaced",
      );
      await assert.rejects(transport.readBack(bundle("redirect").runId), refusal("invalid-artifact-store", "symlink"));
    },
  );

  test(
    "Given nobody planted runs/<hex> as a symlink to its own directory " +
      "before the run arrived, When put, Then integrity-mismatch and nothing " +
      "is written through the link",
    async () => {
      const { base, share, mounted } = makeShare({ open: true });
      const b = bundle("predicted");
      mkdirSync(join(share, "runs"), { mode: 0o777 });
      // runs/ as another user's shared mount might leave it: writable by everyone.
      const { chmodSync } = await import("node:fs");
      chmodSync(join(share, "runs"), 0o777);
      const loot = join(base, "loot2");
      assert.equal(asNobody(["mkdir", "-m", "0777", loot]).status, 0);
      const planted = asNobody(["ln", "-s", loot, join(share, "runs", hexOf(b))]);
      assert.equal(planted.status, 0, planted.stderr);
      const transport = dirTransport(share, { allowSameFilesystem: !mounted });
      await assert.rejects(transport.put(b), refusal("integrity-mismatch", "symlink"));
      assert.deepEqual(readdirSync(loot), [], "nothing written into nobody's directory");
      assert.deepEqual(
        readdirSync(join(share, "runs")).filter((name) => name.startsWith(".")),
        [],
        "our staging was taken back",
      );
    },
  );

  test(
    "Given nobody swapped a file of a delivered run for a symlink to a file " +
      "it controls, When read back, Then integrity-mismatch (symlink), never " +
      "the linked file's bytes",
    async () => {
      const { base, share, mounted } = makeShare({ open: true });
      const b = bundle("swapped");
      const transport = dirTransport(share, { allowSameFilesystem: !mounted });
      await transport.put(b);
      // As if the run directory were writable by others (a careless share): root stages as itself, so we loosen it for
      // the attack.
      const { chmodSync, unlinkSync } = await import("node:fs");
      chmodSync(join(share, "runs", hexOf(b)), 0o777);
      const fake = join(base, "fake-log");
      assert.equal(asNobody(["sh", "-c", `printf forged > '${fake}'`]).status, 0);
      unlinkSync(join(share, "runs", hexOf(b), "log"));
      assert.equal(asNobody(["ln", "-s", fake, join(share, "runs", hexOf(b), "log")]).status, 0);
      await assert.rejects(transport.readBack(b.runId), refusal("integrity-mismatch", "symlink"));
      assert.ok(existsSync(fake));
    },
  );

  test("Given nobody racing every push, moving our staging directory away and putting its own, forged one at that " +
    "name before the rename, When put, Then each put either lands what it wrote (read back equal) or is " +
    "refused (staging-replaced), never delivered with nobody's bytes", { timeout: 120_000 }, async (t) => {
    if (process.getuid?.() !== 0) {
      t.skip("needs root to run the attacker as nobody (uid 65534)");
      return;
    }
    const { share, mounted } = makeShare({ open: true });
    const runs = join(share, "runs");
    mkdirSync(runs);
    const { chmodSync } = await import("node:fs");
    chmodSync(runs, 0o777);
    const swaps = join(share, "swaps");
    // nobody polls runs/ and, for every staging directory it sees, moves it aside and makes its own in its place.
    const script =
      `const fs=require("fs"),p=require("path");const runs=${JSON.stringify(runs)};let n=0;` +
      `const end=Date.now()+100000;fs.writeFileSync(${JSON.stringify(swaps)},"0");` +
      `while(Date.now()<end){for(const name of fs.readdirSync(runs)){` +
      `if(!name.startsWith(".staging"))continue;try{fs.renameSync(p.join(runs,name),p.join(runs,".moved-"+n));` +
      `fs.mkdirSync(p.join(runs,name));fs.writeFileSync(p.join(runs,name,"log"),"forged\\n");n++;` +
      `fs.writeFileSync(${JSON.stringify(swaps)},String(n));}catch{}}}`;
    const { spawn } = await import("node:child_process");
    const attacker = spawn(process.execPath, ["-e", script], { uid: 65534, gid: 65534, stdio: "ignore" });
    const outcomes = { landed: 0, refused: 0 };
    try {
      const transport = dirTransport(share, { allowSameFilesystem: !mounted });
      while (!existsSync(swaps)) await new Promise((resolve) => setTimeout(resolve, 20));
      const deadline = Date.now() + 60_000;
      for (let round = 0; Date.now() < deadline && outcomes.refused < 3; round++) {
        const b = bundle(`race-${round}`);
        try {
          await transport.put(b);
        } catch (error) {
          assert.ok(
            error instanceof OatsError && error.details["reason"] === "staging-replaced",
            `round ${round}: ${String(error)}`,
          );
          outcomes.refused += 1;
          continue;
        }
        const there = await transport.readBack(b.runId);
        for (const [name, bytes] of b.files)
          assert.ok(there?.get(name)?.equals(bytes), `round ${round}: a put that returned landed ${name} as written`);
        outcomes.landed += 1;
        // Keep runs/ small, so the attacker's listing stays as quick as the pushes.
        rmSync(join(runs, hexOf(b)), { recursive: true });
      }
    } finally {
      attacker.kill();
    }
    console.log(
      `staging race: ${JSON.stringify(outcomes)}, swaps ${existsSync(swaps) ? readFileSync(swaps, "utf8") : 0}`,
    );
    assert.ok(outcomes.refused > 0, "the attacker won the race at least once, and each time was refused");
  });
});
