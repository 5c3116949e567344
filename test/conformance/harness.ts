/**
 * Runs the properties against a driver: as node:test tests (one per
 * property, concurrently, a skip by name for what the driver cannot
 * observe), or programmatically for the mutant teeth checks (which
 * properties failed).
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { PROPERTY_NAMES, type Driver, type DriverScope, type PropertyName } from "./driver.js";
import { PROPERTIES, type Property, type PropertyContext } from "./properties/index.js";

/** Temporary directories and scopes for one driver's run of the suite. */
export class SuiteRun {
  private readonly root: string;
  /** One scope per property: its captures share it, other properties' runs and audit locks stay out of it. */
  private readonly scopes = new Map<string, Promise<DriverScope>>();
  private count = 0;

  constructor(readonly driver: Driver) {
    this.root = mkdtempSync(join(tmpdir(), `oats-conf-${driver.name.replace(/[^a-z0-9-]/gi, "-")}-`));
    // A driver may run the child (and itself) as another user: it must reach the scopes and write markers.
    chmodSync(this.root, 0o711);
  }

  context(name: string, diagnostic: (message: string) => void): PropertyContext {
    return {
      driver: this.driver,
      tempDir: (prefix) => {
        const dir = mkdtempSync(join(this.root, prefix));
        chmodSync(dir, 0o777);
        return dir;
      },
      freshScope: () => this.driver.scope(this.newDir(`scope-${name}-`)),
      scope: () => {
        let scope = this.scopes.get(name);
        if (scope === undefined) {
          scope = this.driver.scope(this.newDir(`scope-${name}-`));
          this.scopes.set(name, scope);
        }
        return scope;
      },
      diagnostic,
    };
  }

  private newDir(prefix: string): string {
    this.count += 1;
    const dir = join(this.root, `${prefix}${this.count}`);
    mkdirSync(dir);
    return dir;
  }

  cleanup(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** Every property the driver does not skip against `run`'s driver, timing properties first (see Property.timing): the
 * failures by property. */
export async function attemptAll(run: SuiteRun): Promise<Array<{ property: PropertyName; error: Error | null }>> {
  const outcomes: Array<{ property: PropertyName; error: Error | null }> = [];
  for (const timing of [true, false]) {
    const batch = PROPERTIES.filter(
      (property) => (property.timing === true) === timing && run.driver.skips[property.name] === undefined,
    );
    outcomes.push(
      ...(await Promise.all(
        batch.map(async (property) => ({ property: property.name, error: await attempt(run, property) })),
      )),
    );
  }
  return outcomes;
}

/** The property's outcome against a driver: null when it held, the failure otherwise. */
export async function attempt(
  run: SuiteRun,
  property: Property,
  log: (message: string) => void = () => undefined,
): Promise<Error | null> {
  try {
    await property.run(run.context(property.name, log));
    return null;
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

/**
 * The whole suite against `driver`, as node:test tests. `expectedSkips` is
 * what the suite knows this driver cannot observe: a driver that starts
 * skipping something else (or stops) fails here, by name.
 */
export function registerSuite(driver: Driver, expectedSkips: readonly PropertyName[]): void {
  const title = `conformance: ${driver.name} driver over the ${driver.transport.name} transport`;
  if (driver.transport.unavailable !== null) {
    test(title, (t) =>
      t.skip(`the ${driver.transport.name} transport cannot run here: ${driver.transport.unavailable}`),
    );
    return;
  }
  describe(title, () => {
    const run = new SuiteRun(driver);
    after(async () => {
      run.cleanup();
      await driver.transport.close();
    });

    test("the driver skips exactly the properties the suite expects, by name, each with a reason", () => {
      assert.deepEqual(Object.keys(driver.skips).sort(), [...expectedSkips].sort());
      for (const [name, reason] of Object.entries(driver.skips)) {
        assert.ok((PROPERTY_NAMES as readonly string[]).includes(name), `${name} is a property`);
        assert.ok(typeof reason === "string" && reason.length > 10, `${name} is skipped with a reason`);
      }
    });

    // Timing properties first, among themselves; then the rest, all at once.
    for (const [phase, properties] of [
      ["timing", PROPERTIES.filter((property) => property.timing === true)],
      ["the others", PROPERTIES.filter((property) => property.timing !== true)],
    ] as const) {
      describe(phase, { concurrency: driver.parallel }, () => {
        for (const property of properties) {
          test(`${property.title} [${property.name}]`, { timeout: 300_000 }, async (t) => {
            const reason = driver.skips[property.name];
            if (reason !== undefined) {
              t.skip(`${driver.name} cannot observe ${property.name}: ${reason}`);
              return;
            }
            await property.run(run.context(property.name, (message) => t.diagnostic(message)));
          });
        }
      });
    }
  });
}
