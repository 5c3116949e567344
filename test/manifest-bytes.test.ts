/** The revision manifest, encoded a row at a time, is byte for byte the canonical encoding of the whole document. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJsonBytes } from "../src/core/canonical-json.js";
import { manifestBytes, type ManifestRow } from "../src/retention/store/manifest.js";

test(
  "manifestBytes equals canonicalJsonBytes({ schemaVersion: 1, rows }) for " +
    "escapes, non-ASCII, symlinks and no rows",
  () => {
    const rows: ManifestRow[] = [];
    for (let i = 0; i < 300; i++) {
      rows.push(
        i % 7
          ? {
              path: `d/é\u0001"x${i}\\/\u{1F600}`,
              type: "file",
              exec: i % 3 === 0,
              size: i * 4099,
              sha256: "ab".repeat(32),
            }
          : { path: `s${i}\u2028`, type: "symlink", target: `../t\t${i}` },
      );
    }
    assert.ok(manifestBytes(rows).equals(canonicalJsonBytes({ schemaVersion: 1, rows })));
    assert.ok(manifestBytes(rows.slice(0, 1)).equals(canonicalJsonBytes({ schemaVersion: 1, rows: rows.slice(0, 1) })));
    assert.ok(manifestBytes([]).equals(canonicalJsonBytes({ schemaVersion: 1, rows: [] })));
  },
);
