import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ERROR_CODES, ERROR_KINDS } from "../src/core/errors.js";
import { REPO } from "./helpers.js";

// The contract's table (docs/design/contract.md, section 6) is what operators and scripts read to map exit codes;
// a code the library can throw but the table does not name is a contract nobody was told about.
test(
  "Given every error code the library defines, Then the contract's code " +
    "table names it in the row of its kind, with that kind's exit code",
  () => {
    const readme = readFileSync(join(REPO, "docs/design/contract.md"), "utf8");
    const rows = readme.split("\n").filter((line) => /^\| `[a-z-]+`/.test(line));
    for (const [code, kind] of Object.entries(ERROR_CODES)) {
      const row = rows.find((line) => line.split("|")[1]!.includes(`\`${code}\``));
      assert.ok(row, `the contract's code table lacks ${code}`);
      const cells = row.split("|").map((cell) => cell.trim());
      assert.equal(cells[2], kind, `${code}: kind`);
      assert.equal(Number(cells[3]), ERROR_KINDS[kind as keyof typeof ERROR_KINDS], `${code}: exit code`);
    }
  },
);
