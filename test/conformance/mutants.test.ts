/**
 * The suite's teeth: every property runs against each
 * single-defect mutant of the library driver, and each defect must fail at
 * least one property. A defect that fails nothing is a suite failure: the
 * properties would pass an implementation with that bug. Every defect runs
 * over the dir transport; each other transport has its own teeth check, the
 * no-op delivery mutant (the other defects do not depend on the transport).
 *
 * Which properties caught which defect is printed as a diagnostic (and the
 * expected catches below are asserted, so a property that loses its teeth
 * for a defect it used to catch is noticed by name).
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import type { PropertyName } from "./driver.js";
import { libraryDriver } from "./drivers/library.js";
import { DEFECTS, mutantDriver, type Defect } from "./drivers/mutant.js";
import { TRANSPORTS } from "./drivers/transports.js";
import { SuiteRun, attemptAll } from "./harness.js";

/** The property that must catch each defect, at least (others may catch it too). */
const MUST_CATCH: Record<Defect, PropertyName> = {
  "stamp-at-flush": "stamp-per-line",
  "exit-zero": "exit-status",
  "drop-final-line": "text-not-terminal",
  "noop-delivery": "far-side-delivery",
  "keep-ansi": "text-not-terminal",
  "unmasked-credentials": "redaction",
  "no-group-kill": "cancel-takes-tree",
};

for (const transport of TRANSPORTS) {
  const defects = transport.name === "dir" ? DEFECTS : (["noop-delivery"] as const);
  if (transport.unavailable !== null) {
    test(`conformance teeth over the ${transport.name} transport`, (t) =>
      t.skip(`the ${transport.name} transport cannot run here: ${transport.unavailable}`));
    continue;
  }
  // One defect at a time (each runs its properties concurrently already), so a timing property is not disturbed by
  // another defect's runs.
  describe(`conformance teeth: single-defect mutants over the ${transport.name} transport`, { concurrency: 1 }, () => {
    const runs: SuiteRun[] = [];
    after(async () => {
      runs.forEach((run) => {
        run.cleanup();
      });
      await transport.close();
    });

    for (const defect of defects) {
      test(`the mutant that has "${defect}" fails at least one property (and ${MUST_CATCH[defect]} among them)`, {
        timeout: 300_000,
      }, async (t) => {
        const driver = mutantDriver(libraryDriver(transport), defect);
        const skipped = driver.skips[MUST_CATCH[defect]];
        if (skipped !== undefined) {
          t.skip(`the base driver skips ${MUST_CATCH[defect]}: ${skipped}`);
          return;
        }
        const run = new SuiteRun(driver);
        runs.push(run);
        const outcomes = await attemptAll(run);
        const caught = outcomes.filter((outcome) => outcome.error !== null);
        for (const { property, error } of caught)
          t.diagnostic(`${defect} caught by ${property}: ${error!.message.split("\n")[0]}`);
        t.diagnostic(
          `${defect}: caught by ${caught.length} of ${outcomes.length} properties ` +
            `(${caught.map((outcome) => outcome.property).join(", ") || "none"})`,
        );
        assert.ok(caught.length > 0, `no property fails the mutant with "${defect}": the suite has no teeth for it`);
        assert.ok(
          caught.some((outcome) => outcome.property === MUST_CATCH[defect]),
          `${MUST_CATCH[defect]} must catch "${defect}"; caught by ` +
            `${caught.map((outcome) => outcome.property).join(", ")}`,
        );
      });
    }
  });
}
