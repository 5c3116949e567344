/**
 * The hint under a human error fits the failure: a damaged revision names the command that puts it back, a
 * registry that lacks a reference gets a registry hint rather than the local store's, and `oats` alone is help.
 */
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { OatsError } from "../src/index.js";
import { humanError } from "../src/cli/support/render.js";
import { FIXTURE_PAYLOAD, runOats, tamper, tempDir } from "./helpers.js";

test("a damaged stored revision's integrity-mismatch names oats repair, which exists", () => {
  const scope = tempDir();
  const retained = runOats([
    "--json",
    "--scope",
    scope,
    "retain",
    FIXTURE_PAYLOAD,
    "--kind",
    "capture",
    "--id",
    "demo",
  ]);
  assert.equal(retained.status, 0, retained.stderr);
  const { integrity, dir } = JSON.parse(retained.stdout).result as {
    integrity: { format: string; value: string };
    dir: string;
  };
  const file = readdirSync(dir).find((name) => name.endsWith(".json"))!;
  tamper(join(dir, file));
  const verified = runOats([
    "--scope",
    scope,
    "verify",
    "demo",
    "--kind",
    "capture",
    "--integrity",
    `${integrity.format}:${integrity.value}`,
  ]);
  assert.equal(verified.status, 5, verified.stderr);
  assert.match(verified.stderr, /^oats: integrity-mismatch: /);
  assert.match(verified.stderr, /`oats repair <kind>:<key>@<integrity> --from <trusted copy>`/);
  assert.equal(runOats(["repair", "--help"]).status, 0, "the command the hint names ships");
});

test("a manifest the registry does not have gets a registry hint, not the local store's", () => {
  const missing = new OatsError("artifact-not-found", "127.0.0.1:5000 has no manifest nightly in oats/dev", {
    host: "127.0.0.1:5000",
    repository: "oats/dev",
    reference: "nightly",
  });
  const text = humanError(missing, "pull");
  assert.match(text, /the registry named above has no such tag or digest in that repository/);
  assert.match(text, /`oats push --help`/);
  assert.doesNotMatch(text, /retain the artifact first/);
  const local = humanError(new OatsError("artifact-not-found", "no revision", { key: "demo" }), "verify");
  assert.match(local, /retain the artifact first/);
});
