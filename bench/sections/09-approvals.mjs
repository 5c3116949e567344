import { appendFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DIST, WORK, fmtMs, median, notes, oats, removeTree, timeRow } from "../lib.mjs";

// ---------------------------------------------------------------- 11. approval cross-check vs ledger size

const { canonicalJson } = await import(join(DIST, "core", "canonical-json.js"));
const { entryHash } = await import(join(DIST, "ledger", "chain-line.js"));

const SIZES = [1, 1_000, 100_000];
const GENESIS = `sha256-${"0".repeat(64)}`;
const subjectFor = (n) => ({
  kind: "capture",
  key: `bench-${n}`,
  integrity: `oats.tree-exec.v1:sha256-${n.toString(16).padStart(64, "0")}`,
});

/**
 * A scope whose approvals ledger holds `count` approvals of distinct subjects
 * and whose audit log holds their `approve` entries, exactly as decide()
 * writes them (generated with the public chain rule: appending 100,000
 * decisions one fsync'd append at a time would take minutes).
 */
export function historyScope(count) {
  const scope = join(WORK, `approvals-${count}`);
  removeTree(scope);
  const ledgerDir = join(scope, ".agents", "approvals");
  const auditDir = join(scope, ".agents", "audit");
  mkdirSync(ledgerDir, { recursive: true });
  mkdirSync(auditDir, { recursive: true });
  writeFileSync(join(ledgerDir, ".gitignore"), "*\n");
  writeFileSync(join(auditDir, ".gitignore"), "*\n");
  const history = {
    scope,
    ledger: join(ledgerDir, "ledger.jsonl"),
    audit: join(auditDir, "audit.jsonl"),
    seq: 0,
    ledgerPrev: GENESIS,
    auditPrev: GENESIS,
  };
  writeFileSync(history.ledger, "");
  writeFileSync(history.audit, "");
  appendDecisions(history, count);
  return history;
}

/** Append `count` more decisions (ledger entry + its audit entry) to both logs, as decide() writes them. */
export function appendDecisions(history, count) {
  const at = new Date().toISOString();
  const ledger = [];
  const audit = [];
  for (let i = 0; i < count; i++) {
    const n = ++history.seq;
    const subject = subjectFor(n);
    const decision = {
      seq: n,
      at,
      action: "approve",
      subject,
      operator: "bench@host",
      reason: "bench",
      prev: history.ledgerPrev,
    };
    decision.hash = entryHash(decision);
    history.ledgerPrev = decision.hash;
    ledger.push(canonicalJson(decision));
    const entry = {
      seq: n,
      at,
      principal: "bench@host",
      action: "approve",
      subject,
      outcome: "ok",
      details: { ledger: { seq: n, hash: decision.hash }, reason: "bench" },
      prev: history.auditPrev,
    };
    entry.hash = entryHash(entry);
    history.auditPrev = entry.hash;
    audit.push(canonicalJson(entry));
  }
  appendFileSync(history.ledger, ledger.join(""));
  appendFileSync(history.audit, audit.join(""));
}

function timeOnce(fn) {
  const started = performance.now();
  fn();
  return performance.now() - started;
}

/**
 * requireApproval with ledgers of 1, 1,000 and 100,000 decisions (and as many
 * audit entries). Cold: a fresh private state directory, so the first call
 * verifies both logs in full and writes the checkpoint. Warm: the checkpoint
 * is there and the logs are unchanged (the fast path: stat, one table slot
 * and one small bucket per log, one line read back per log). After another
 * writer's append: the first call after one decision was added to both logs
 * by something other than this state's oats (hash of the anchored prefix,
 * verification of the new lines). The linear baseline is what every call cost
 * before (readEntries of the whole ledger, no cross-check).
 */
async function benchApprovals() {
  console.error("\n[11] requireApproval (ledger cross-checked with the audit log) vs ledger size");
  const saved = process.env.OATS_STATE_DIR;
  const results = [];
  try {
    for (const count of SIZES) {
      const history = historyScope(count);
      const { scope } = history;
      const probe = subjectFor(Math.max(1, count >> 1));
      const cold = [];
      for (let run = 0; run < 3; run++) {
        process.env.OATS_STATE_DIR = join(WORK, `approvals-state-${count}-${run}`);
        removeTree(process.env.OATS_STATE_DIR);
        cold.push(timeOnce(() => oats.requireApproval(scope, probe)));
      }
      const warm = [];
      for (let run = 0; run < 200; run++)
        warm.push(timeOnce(() => oats.requireApproval(scope, subjectFor(1 + ((run * 7919) % count)))));
      // Another writer (another account's oats) appends one decision: the next call hashes the anchored prefix and
      // verifies the new lines.
      const changed = [];
      for (let run = 0; run < 3; run++) {
        appendDecisions(history, 1);
        changed.push(timeOnce(() => oats.requireApproval(scope, subjectFor(history.seq))));
      }
      const linear = [];
      for (let run = 0; run < (count > 10_000 ? 3 : 20); run++)
        linear.push(timeOnce(() => oats.readEntries(scope, oats.CHAIN_LOGS.approvals)));
      results.push({ count, cold: median(cold), warm: median(warm), changed: median(changed), linear: median(linear) });
      console.error(
        `  .. ${count} decisions: cold ${fmtMs(median(cold))}, warm ` +
          `${(median(warm) * 1000).toFixed(0)} µs, after another writer's append ` +
          `${fmtMs(median(changed))}, whole-ledger read ${fmtMs(median(linear))}`,
      );
      for (let run = 0; run < 3; run++) removeTree(join(WORK, `approvals-state-${count}-${run}`));
      removeTree(scope);
    }
  } finally {
    if (saved === undefined) delete process.env.OATS_STATE_DIR;
    else process.env.OATS_STATE_DIR = saved;
  }
  const one = results[0];
  const big = results[results.length - 1];
  timeRow({
    id: "11",
    what: "requireApproval, warm checkpoint: 100,000 decisions vs 1 (ledger + audit cross-check)",
    oursMs: big.warm,
    baseMs: one.warm,
    goal: 3,
    oursExtra: " @100k",
    baseExtra: " @1",
  });
  timeRow({
    id: "11b",
    what: "requireApproval, cold (fresh state dir: full verification + checkpoint): 100,000 decisions vs 1",
    oursMs: big.cold,
    baseMs: one.cold,
    goal: null,
    headline: false,
    oursExtra: " @100k",
    baseExtra: " @1",
  });
  notes.push(
    `[11] requireApproval per call (median): ` +
      results
        .map(
          (r) =>
            `${r.count.toLocaleString("en-US")} decisions: warm ${(r.warm * 1000).toFixed(0)} µs, ` +
            `after another writer's append ${fmtMs(r.changed)}, cold ${fmtMs(r.cold)}, ` +
            `whole-ledger read (the old per-call cost) ${fmtMs(r.linear)}`,
        )
        .join("; ") +
      ".",
  );
}

export const parts = { approvals: benchApprovals };
