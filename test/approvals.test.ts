import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  type ApprovalSubjectInput,
  approvalState,
  approve,
  listApprovals,
  requireApproval,
  revoke,
} from "../src/captures/approvals.js";
import type { IntegrityInput } from "../src/retention/index.js";
import { verifyChain, CHAIN_LOGS } from "../src/ledger/chain-log.js";
import { currentPrincipal } from "../src/captures/classification.js";
import type { OatsError } from "../src/core/errors.js";
import { tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const A = `sha256-${"a".repeat(64)}`;
const B = `sha256-${"b".repeat(64)}`;
const execA = `oats.tree-exec.v1:${A}`;
const execB = `oats.tree-exec.v1:${B}`;
const subjectA = { kind: "capture", key: "nightly-report", integrity: execA } as const;

function ledgerPath(scope: string): string {
  return join(scope, ".agents", "approvals", "ledger.jsonl");
}

function ledgerLines(scope: string): string[] {
  return existsSync(ledgerPath(scope)) ? readFileSync(ledgerPath(scope), "utf8").split("\n").slice(0, -1) : [];
}

describe("approvals ledger", () => {
  test(
    "Given an approved exec digest, When requireApproval asks, Then it " +
      "passes and the entry is on the chained ledger",
    async () => {
      const scope = tempDir("oats-approvals-");
      const written = await approve(scope, subjectA, { reason: "reviewed the tree" });
      const entry = requireApproval(scope, subjectA);
      assert.equal(entry.hash, written.hash);
      assert.equal(entry.action, "approve");
      assert.deepEqual(entry.subject, { kind: "capture", key: "nightly-report", integrity: execA });
      assert.equal(entry.reason, "reviewed the tree");
      assert.deepEqual(approvalState(scope, subjectA), { approved: true, entry });
      assert.equal(ledgerLines(scope).length, 1);
      assert.deepEqual(verifyChain(scope, CHAIN_LOGS.approvals), { ok: true, entries: 1, head: written.hash });
    },
  );

  test(
    "Given integrity as {format, value}, When approving, Then the subject is " +
      "stored in text form and matches the text form",
    async () => {
      const scope = tempDir("oats-approvals-");
      const entry = await approve(
        scope,
        { kind: "capture", key: "nightly-report", integrity: { format: "oats.tree-exec.v1", value: A } },
        { reason: "ok" },
      );
      assert.equal(entry.subject.integrity, execA);
      assert.equal(approvalState(scope, subjectA).approved, true);
    },
  );

  test(
    "Given USER and OATS_PRINCIPAL set in the environment, When approving, " +
      "Then the operator is still the process's own account@host",
    async () => {
      const scope = tempDir("oats-approvals-");
      const saved = {
        USER: process.env.USER,
        OATS_PRINCIPAL: process.env.OATS_PRINCIPAL,
        LOGNAME: process.env.LOGNAME,
      };
      process.env.USER = "mallory";
      process.env.LOGNAME = "mallory";
      process.env.OATS_PRINCIPAL = "mallory@elsewhere";
      try {
        const entry = await approve(scope, subjectA, { reason: "ok", operator: "mallory@elsewhere" } as never);
        assert.equal(entry.operator, currentPrincipal());
        assert.equal(entry.operator, `${userInfo().username}@${hostname()}`);
        assert.notEqual(entry.operator, "mallory@elsewhere");
      } finally {
        for (const [name, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
      }
    },
  );

  test(
    "Given an approval, When it is revoked, Then requireApproval refuses " +
      "with approval-required naming the subject and the revocation",
    async () => {
      const scope = tempDir("oats-approvals-");
      await approve(scope, subjectA, { reason: "reviewed" });
      const revocation = await revoke(scope, subjectA, { reason: "compromised upstream" });
      assert.equal(approvalState(scope, subjectA).approved, false);
      assert.throws(
        () => requireApproval(scope, subjectA),
        (error: unknown) => {
          refusal("approval-required")(error);
          const details = (error as OatsError).details as Record<string, unknown>;
          assert.deepEqual(details.subject, subjectA);
          assert.deepEqual(details.lastDecision, revocation);
          return true;
        },
      );
    },
  );

  test(
    "Given a revoked approval, When it is approved again, Then it is " + "approved (the latest decision wins)",
    async () => {
      const scope = tempDir("oats-approvals-");
      await approve(scope, subjectA, { reason: "first" });
      await revoke(scope, subjectA, { reason: "pause" });
      const again = await approve(scope, subjectA, { reason: "resume" });
      assert.deepEqual(approvalState(scope, subjectA), { approved: true, entry: again });
      assert.equal(requireApproval(scope, subjectA).seq, 3);
    },
  );

  test(
    "Given a subject never decided on, When requireApproval asks, Then " + "approval-required with lastDecision null",
    () => {
      const scope = tempDir("oats-approvals-");
      assert.deepEqual(approvalState(scope, subjectA), { approved: false, entry: null });
      assert.throws(() => requireApproval(scope, subjectA), refusal("approval-required", { lastDecision: null }));
    },
  );

  test(
    "Given digest A approved, When asking about digest B of the same key, or " +
      "A under another key or kind, Then none is approved",
    async () => {
      const scope = tempDir("oats-approvals-");
      await approve(scope, subjectA, { reason: "reviewed A" });
      for (const other of [
        { kind: "capture", key: "nightly-report", integrity: execB },
        { kind: "capture", key: "weekly-report", integrity: execA },
        { kind: "capability", key: "nightly-report", integrity: execA },
      ] as const) {
        assert.deepEqual(approvalState(scope, other), { approved: false, entry: null }, JSON.stringify(other));
        assert.throws(() => requireApproval(scope, other), refusal("approval-required"));
      }
      assert.equal(requireApproval(scope, subjectA).subject.integrity, execA);
    },
  );

  test(
    "Given a legacy or package-payload digest, When approving, Then " +
      "invalid-artifact-reference explains why and nothing is appended",
    async () => {
      const scope = tempDir("oats-approvals-");
      const cases: Array<[IntegrityInput, RegExp]> = [
        [`oats.tree-legacy.v0:${A}`, /exec bits/],
        [A, /exec bits/],
        [{ format: "oats.tree-legacy.v0", value: A }, /exec bits/],
        [`oats.package-payload-exec.v1:${A}`, /oats\.tree-exec\.v1/],
        [`oats.json.v1:${A}`, /oats\.tree-exec\.v1/],
      ];
      for (const [integrity, message] of cases) {
        await assert.rejects(
          approve(scope, { kind: "capture", key: "nightly-report", integrity }, { reason: "ok" }),
          (error: unknown) => refusal("invalid-artifact-reference")(error) && message.test((error as Error).message),
          JSON.stringify(integrity),
        );
        await assert.rejects(
          revoke(scope, { kind: "capture", key: "nightly-report", integrity }, { reason: "ok" }),
          refusal("invalid-artifact-reference"),
        );
        assert.throws(
          () => approvalState(scope, { kind: "capture", key: "nightly-report", integrity }),
          refusal("invalid-artifact-reference"),
        );
      }
      assert.deepEqual(ledgerLines(scope), []);
    },
  );

  test(
    "Given a bad kind, key or abbreviated digest, When approving, Then " +
      "invalid-artifact-reference and nothing is appended",
    async () => {
      const scope = tempDir("oats-approvals-");
      // Malformed on purpose (an unknown kind among them): the refusal is what is tested.
      for (const subject of [
        { kind: "package", key: "nightly-report", integrity: execA },
        { kind: "capture", key: "Bad Key", integrity: execA },
        { kind: "source", key: "not-hex", integrity: execA },
        { kind: "capture", key: "nightly-report", integrity: "oats.tree-exec.v1:sha256-abc" },
        { kind: "capture", key: "nightly-report", integrity: execA.toUpperCase() },
      ]) {
        await assert.rejects(
          approve(scope, subject as ApprovalSubjectInput, { reason: "ok" }),
          refusal("invalid-artifact-reference"),
          JSON.stringify(subject),
        );
      }
      await assert.rejects(approve(scope, null as never, { reason: "ok" }), refusal("invalid-artifact-reference"));
      assert.deepEqual(ledgerLines(scope), []);
    },
  );

  test(
    "Given an empty, blank or missing reason, When approving or revoking, " +
      "Then invalid-input and nothing is appended",
    async () => {
      const scope = tempDir("oats-approvals-");
      for (const options of [{ reason: "" }, { reason: "   " }, {}, { reason: 42 }, undefined]) {
        await assert.rejects(
          approve(scope, subjectA, options as never),
          refusal("invalid-input"),
          JSON.stringify(options),
        );
        await assert.rejects(
          revoke(scope, subjectA, options as never),
          refusal("invalid-input"),
          JSON.stringify(options),
        );
      }
      assert.deepEqual(ledgerLines(scope), []);
    },
  );

  test(
    "Given an approved subject and a ledger with one byte changed, When " +
      "asking its state, Then it is refused, never approved",
    async () => {
      const scope = tempDir("oats-approvals-");
      await approve(scope, subjectA, { reason: "reviewed" });
      await revoke(scope, subjectA, { reason: "pulled" });
      // Turn the revoke into an approve: an attacker editing the ledger.
      const text = readFileSync(ledgerPath(scope), "utf8");
      const lines = text.split("\n");
      assert.ok(lines[1]?.includes('"action":"revoke"'));
      lines[1] = lines[1]!.replace('"action":"revoke"', '"action":"approve"');
      writeFileSync(ledgerPath(scope), lines.join("\n"));
      assert.throws(() => approvalState(scope, subjectA), refusal("integrity-mismatch"));
      assert.throws(() => requireApproval(scope, subjectA), refusal("integrity-mismatch"));
      assert.throws(() => listApprovals(scope), refusal("integrity-mismatch"));
    },
  );

  test(
    "Given a ledger with a single byte flipped in a reason, When asking its " + "state, Then integrity-mismatch",
    async () => {
      const scope = tempDir("oats-approvals-");
      await approve(scope, subjectA, { reason: "reviewed" });
      const bytes = readFileSync(ledgerPath(scope));
      const at = bytes.indexOf("reviewed");
      bytes[at] = "R".charCodeAt(0);
      writeFileSync(ledgerPath(scope), bytes);
      assert.throws(() => approvalState(scope, subjectA), refusal("integrity-mismatch"));
    },
  );

  test("Given several decisions, When listing, Then each subject shows its latest decision", async () => {
    const scope = tempDir("oats-approvals-");
    const subjectB = { kind: "capture", key: "nightly-report", integrity: execB } as const;
    const subjectC = { kind: "capability", key: "hello", integrity: execA } as const;
    await approve(scope, subjectA, { reason: "a" });
    await approve(scope, subjectB, { reason: "b" });
    await revoke(scope, subjectA, { reason: "a out" });
    const lastC = await approve(scope, subjectC, { reason: "c" });
    const lastB = await revoke(scope, subjectB, { reason: "b out" });
    const lastA = await approve(scope, subjectA, { reason: "a back" });
    const listing = listApprovals(scope);
    assert.deepEqual(
      listing.map((item) => [item.subject, item.approved, item.entry?.seq]),
      [
        [subjectA, true, lastA.seq],
        [subjectB, false, lastB.seq],
        [subjectC, true, lastC.seq],
      ],
    );
    assert.deepEqual(listApprovals(tempDir("oats-approvals-")), []);
  });
});
