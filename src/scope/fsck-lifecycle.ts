import { lstatSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { OatsError } from "../core/index.js";
import { PINS_DIR, pinRefText, readPin, QUARANTINE_DIR } from "../lifecycle/index.js";
import { stagingAbandoned, listLeases, RUN_COPIES_STORE, STAGING_PREFIX } from "../retention/index.js";
import { findingOf, guarded, notice, type Finding } from "./findings.js";
import { revisionKey, storeNames, type RecordsPresent } from "./fsck-stores.js";

/**
 * What the lifecycle commands leave in a scope: pins (gc roots), publisher
 * leases, quarantined trees (repair) and run copies (dispatch). Pins are
 * checked like any reference; the rest are leftovers, reported as notices so
 * an operator knows they are there, and never removed here.
 */

/**
 * Every pin reads as gc reads it (readPin: schema, and a name that is the
 * digest of the reference) and names a revision or record the scope holds.
 * Dot names are the pin writer's staging, reported by the store listing.
 */
export function checkPins(
  scope: string,
  revisions: ReadonlySet<string>,
  records: RecordsPresent,
  findings: Finding[],
): number {
  let checked = 0;
  guarded(findings, "pins", PINS_DIR.join("/"), () => {
    const { dir, names } = storeNames(scope, PINS_DIR);
    for (const name of names) {
      if (name.startsWith(".")) continue;
      checked += 1;
      const path = join(dir, name);
      const pin = guarded(findings, "pins", name, () => readPin(path));
      if (pin === null) continue;
      const { ref } = pin;
      const text = pinRefText(ref);
      const present = ref.type === "resolution" ? records.has(ref.id) : revisions.has(revisionKey(ref));
      if (present) continue;
      const error =
        ref.type === "resolution"
          ? new OatsError(
              "resolution-not-found",
              `pin ${name} keeps resolution ${text}, which this scope does not hold`,
              { pin: name, ref: text, path },
            )
          : new OatsError("artifact-not-found", `pin ${name} keeps ${text}, which is not retained in this scope`, {
              pin: name,
              ref: text,
              path,
            });
      findings.push(findingOf(error, "pins", text, path));
    }
  });
  return checked;
}

/** Leases whose publisher is gone (as gc judges them); gc removes them when it next runs. */
export function checkLeases(scope: string, findings: Finding[]): void {
  guarded(findings, "leases", ".agents/leases", () => {
    for (const path of listLeases(scope).abandoned)
      findings.push(
        notice("leases", path, "a lease whose publisher is gone; ignored, and removed by the next `oats gc`"),
      );
  });
}

/** Every tree repair moved aside: kept for inspection until an operator removes it. */
export function checkQuarantine(scope: string, findings: Finding[]): number {
  let held = 0;
  guarded(findings, "quarantine", QUARANTINE_DIR.join("/"), () => {
    const { dir, names } = storeNames(scope, QUARANTINE_DIR);
    for (const name of names) {
      if (name === ".gitignore") continue;
      held += 1;
      const path = join(dir, name);
      const what = lstatSync(path).isDirectory()
        ? "a damaged tree moved aside by `oats repair`"
        : "not a quarantined tree";
      findings.push(notice("quarantine", path, `${what}; kept for inspection, remove it by hand when done`));
    }
  });
  return held;
}

/** A run copy directory: staging in the run-copies store, as the store listing reports it. */
export function isRunCopy(realScope: string, path: string): boolean {
  return dirname(path) === join(realScope, ...RUN_COPIES_STORE) && basename(path).startsWith(STAGING_PREFIX);
}

/** Run copies whose dispatcher is gone (as `oats cleanup` judges them, which removes them); a live dispatch's copy is
 * not reported. */
export function checkRunCopies(paths: readonly string[], findings: Finding[]): void {
  for (const path of paths) {
    const gone = guarded(findings, "run-copies", path, () => stagingAbandoned(path));
    if (gone)
      findings.push(notice("run-copies", path, "a run copy whose dispatcher is gone; `oats cleanup` removes it"));
  }
}
