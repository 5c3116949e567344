/**
 * Property 5 and the run-time trust chain: a dispatch that is refused (not
 * approved, revoked, mismatched, tampered, classification, audit
 * unavailable) starts no run and writes no run record, and a marker the
 * child would write is absent; a control dispatch with everything in order
 * runs. Each property works in a scope of its own, so "no run" means none.
 */
import assert from "node:assert/strict";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { CaptureRequest, DriverScope, QueuedCapture } from "../driver.js";
import {
  assertRan,
  assertRefused,
  captureName,
  sh,
  shQuote,
  texts,
  type Property,
  type PropertyContext,
} from "./support.js";

/** A capture that writes `marker` when (and only when) it runs. */
function markerCapture(
  context: PropertyContext,
  prefix: string,
  extra: Partial<CaptureRequest> = {},
): { request: CaptureRequest; marker: string } {
  const marker = join(context.tempDir("oats-conf-marker-"), "ran");
  return {
    marker,
    request: { name: captureName(prefix), script: sh(`touch ${shQuote(marker)}`, "echo ran"), ...extra },
  };
}

async function assertNoRun(
  scope: DriverScope,
  capture: QueuedCapture,
  marker: string,
  what: string,
  code: string,
): Promise<void> {
  const outcome = await scope.dispatch(capture).done;
  assertRefused(outcome, what, code);
  assert.equal(existsSync(marker), false, `${what}: nothing ran (the marker is absent)`);
  assert.deepEqual(await scope.listRuns(), [], `${what}: no run record exists`);
}

async function assertControlRuns(scope: DriverScope, capture: QueuedCapture, marker: string): Promise<void> {
  const outcome = await scope.dispatch(capture).done;
  assertRan(outcome, "the control dispatch");
  assert.equal(outcome.result, "OK");
  assert.equal(existsSync(marker), true, "the control ran (its marker is present)");
  const runs = await scope.listRuns();
  assert.equal(runs.length, 1, `exactly the control's run exists: ${JSON.stringify(runs)}`);
  assert.equal(runs[0]!.runId, outcome.runId);
  assert.deepEqual(texts((await scope.readRun(outcome.runId)).lines), ["ran"]);
}

export const refusedDispatchNoRun: Property = {
  name: "refused-dispatch-no-run",
  title:
    "5. a refused dispatch (not approved, mismatched, classification, audit " +
    "unavailable) starts no run and writes no run record; a control dispatch runs",
  async run(context) {
    const scope = await context.scope();

    const unapproved = markerCapture(context, "refuse-unapproved", { approve: false });
    await assertNoRun(
      scope,
      await scope.queue(unapproved.request),
      unapproved.marker,
      "not approved",
      "approval-required",
    );

    const mismatched = markerCapture(context, "refuse-mismatch");
    const changed = await scope.spoil(await scope.queue(mismatched.request), "mismatch");
    await assertNoRun(scope, changed, mismatched.marker, "mismatched composition", "approval-required");

    const classified = markerCapture(context, "refuse-class", { classification: "confidential", sovereign: false });
    await assertNoRun(
      scope,
      await scope.queue(classified.request),
      classified.marker,
      "classification",
      "classification-refused",
    );

    const unaudited = markerCapture(context, "refuse-audit");
    const queued = await scope.queue(unaudited.request);
    await scope.withAuditUnavailable(() =>
      assertNoRun(scope, queued, unaudited.marker, "audit unavailable", "audit-unavailable"),
    );

    // The same audit-refused capture, with the audit log back, is the control: everything in order runs.
    await assertControlRuns(scope, queued, unaudited.marker);
  },
};

export const trustUnapproved: Property = {
  name: "trust-unapproved",
  title:
    "trust chain: a capture that was never approved, or whose approval was " +
    "revoked, never starts a run (no run, no marker)",
  async run(context) {
    const scope = await context.scope();
    const never = markerCapture(context, "trust-never", { approve: false });
    await assertNoRun(scope, await scope.queue(never.request), never.marker, "never approved", "approval-required");

    const revoked = markerCapture(context, "trust-revoked");
    const capture = await scope.queue(revoked.request);
    await assertNoRun(
      scope,
      await scope.spoil(capture, "revoke"),
      revoked.marker,
      "approval revoked",
      "approval-required",
    );
  },
};

export const trustTampered: Property = {
  name: "trust-tampered",
  title:
    "trust chain: a capture whose retained executable was changed after " +
    "approval never starts a run (no new run, no marker)",
  async run(context) {
    const scope = await context.scope();
    const control = markerCapture(context, "trust-tamper");
    const capture = await scope.queue(control.request);
    await assertControlRuns(scope, capture, control.marker);
    const runs = await scope.listRuns();

    rmSync(control.marker);
    const tampered = await scope.spoil(capture, "tamper");
    const outcome = await scope.dispatch(tampered).done;
    assertRefused(outcome, "tampered executable", "integrity-mismatch");
    assert.equal(existsSync(control.marker), false, "the tampered executable did not run (the marker is absent)");
    assert.deepEqual(await scope.listRuns(), runs, "no new run record: only the control's run exists");
  },
};
