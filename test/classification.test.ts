import assert from "node:assert/strict";
import { symlinkSync, writeFileSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  classificationGate,
  currentPrincipal,
  deriveLevel,
  effectiveClassification,
  globMatch,
  LEVELS,
  parseClassificationConfig,
  readClassificationConfigFile,
  stricter,
  strictest,
  type ClassificationConfig,
} from "../src/captures/classification.js";
import { OatsError } from "../src/core/errors.js";
import { tempDir } from "./helpers.js";

const FULL = `schemaVersion: 1
wings:
  acme: internal
  constructor: public
repos:
  acme-site: public
  vault: confidential
defaults:
  - match: "client-*"
    level: confidential
  - match: "docs-?"
    level: public
fallback: internal
principals:
  alice@box: sovereign
  bob@box: non-sovereign
`;

function parse(text: string): ClassificationConfig {
  return parseClassificationConfig(Buffer.from(text));
}

function refusedInvalid(text: string | Buffer, pointer?: string): void {
  assert.throws(
    () => parseClassificationConfig(typeof text === "string" ? Buffer.from(text) : text),
    (error: unknown) => {
      assert.ok(error instanceof OatsError, `expected OatsError, got ${String(error)}`);
      assert.equal(error.code, "invalid-input");
      if (pointer !== undefined) {
        assert.equal(error.details["pointer"], pointer);
        assert.match(error.message, new RegExp(pointer.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
      }
      return true;
    },
  );
}

describe("levels", () => {
  test(
    "Given the three levels, When compared, Then public < internal < " + "confidential and stricter is the maximum",
    () => {
      assert.deepEqual([...LEVELS], ["public", "internal", "confidential"]);
      assert.equal(stricter("public", "internal"), "internal");
      assert.equal(stricter("internal", "public"), "internal");
      assert.equal(stricter("confidential", "internal"), "confidential");
      assert.equal(stricter("public", "public"), "public");
      assert.equal(strictest(["public", "confidential", "internal"]), "confidential");
      assert.equal(strictest(["public", "internal"]), "internal");
      assert.equal(strictest([]), "public");
    },
  );
});

describe("parseClassificationConfig", () => {
  test(
    "Given a YAML config with every field, When parsed, Then every table is " +
      "a Map and `constructor` is an ordinary name",
    () => {
      const config = parse(FULL);
      assert.equal(config.schemaVersion, 1);
      assert.ok(config.wings instanceof Map);
      assert.deepEqual(
        [...config.wings],
        [
          ["acme", "internal"],
          ["constructor", "public"],
        ],
      );
      assert.deepEqual(
        [...config.repos],
        [
          ["acme-site", "public"],
          ["vault", "confidential"],
        ],
      );
      assert.deepEqual(config.defaults, [
        { match: "client-*", level: "confidential" },
        { match: "docs-?", level: "public" },
      ]);
      assert.equal(config.fallback, "internal");
      assert.deepEqual(
        [...config.principals],
        [
          ["alice@box", "sovereign"],
          ["bob@box", "non-sovereign"],
        ],
      );
    },
  );

  test("Given a config without a fallback, When parsed, Then the fallback is confidential", () => {
    const config = parse("schemaVersion: 1\n");
    assert.equal(config.fallback, "confidential");
    assert.equal(config.wings.size, 0);
    assert.equal(config.principals.size, 0);
    assert.equal(deriveLevel(config, { repo: "anything" }).level, "confidential");
  });

  test("Given an unknown top-level key, When parsed, Then invalid-input", () => {
    refusedInvalid("schemaVersion: 1\nextra: true\n");
  });

  test("Given a bad level, When parsed, Then invalid-input naming the path", () => {
    refusedInvalid("schemaVersion: 1\nwings:\n  acme: secret\n", "/wings/acme");
    refusedInvalid("schemaVersion: 1\nfallback: top-secret\n", "/fallback");
    refusedInvalid("schemaVersion: 1\nprincipals:\n  a@b: root\n", "/principals/a@b");
  });

  test("Given a glob that is not a string, When parsed, Then invalid-input naming the path", () => {
    refusedInvalid("schemaVersion: 1\ndefaults:\n  - match: 42\n    level: public\n", "/defaults/0/match");
    refusedInvalid("schemaVersion: 1\ndefaults:\n  - match: [a]\n    level: public\n", "/defaults/0/match");
    refusedInvalid("schemaVersion: 1\ndefaults:\n  - match: a\n    level: public\n    extra: 1\n");
  });

  test("Given a wrong or missing schemaVersion, When parsed, Then invalid-input", () => {
    refusedInvalid("schemaVersion: 2\n", "/schemaVersion");
    refusedInvalid("wings: {}\n", "/schemaVersion");
  });

  test("Given a duplicate YAML key, When parsed, Then invalid-input", () => {
    refusedInvalid("schemaVersion: 1\nwings:\n  acme: public\n  acme: confidential\n");
    refusedInvalid("schemaVersion: 1\nschemaVersion: 1\n");
  });

  test("Given a __proto__ key, When parsed, Then invalid-input naming it and Object.prototype untouched", () => {
    refusedInvalid("schemaVersion: 1\nwings:\n  __proto__: public\n", "/wings/__proto__");
    refusedInvalid("schemaVersion: 1\nprincipals:\n  __proto__: sovereign\n", "/principals/__proto__");
    refusedInvalid("__proto__:\n  polluted: true\nschemaVersion: 1\n", "/__proto__");
    assert.equal(({} as Record<string, unknown>)["polluted"], undefined);
  });

  test("Given input that is not one YAML mapping, When parsed, Then invalid-input", () => {
    refusedInvalid("schemaVersion: [1\n");
    refusedInvalid("{ not: yaml: at all");
    refusedInvalid("schemaVersion: 1\n---\nschemaVersion: 1\n");
    refusedInvalid("just a string\n");
    refusedInvalid("");
    refusedInvalid(Buffer.from([0xff, 0xfe, 0x00]));
  });

  test(
    "Given a config file, When read, Then the exact bytes are returned with " +
      "the config; a missing file, a directory or a symlink at the name is invalid-input",
    () => {
      const dir = tempDir("oats-classification-");
      const file = join(dir, "classification.yaml");
      writeFileSync(file, FULL);
      const { bytes, config } = readClassificationConfigFile(file);
      assert.equal(bytes.toString("utf8"), FULL);
      assert.equal(config.fallback, "internal");
      // Opened without following a link at its name: another user who owns the directory could swap it.
      const link = join(dir, "link.yaml");
      symlinkSync(file, link);
      assert.throws(() => readClassificationConfigFile(link), { code: "invalid-input" });
      assert.throws(() => readClassificationConfigFile(join(dir, "missing.yaml")), { code: "invalid-input" });
      assert.throws(() => readClassificationConfigFile(dir), { code: "invalid-input" });
    },
  );
});

describe("deriveLevel", () => {
  const config = parse(FULL);

  test(
    "Given a wing and a repo with different levels, When derived, Then the " + "strictest wins and both are listed",
    () => {
      const derived = deriveLevel(config, { wing: "acme", repo: "acme-site" });
      assert.equal(derived.level, "internal");
      assert.equal(derived.fallback, false);
      assert.deepEqual(derived.matched, [
        { source: "wing", key: "acme", level: "internal" },
        { source: "repo", key: "acme-site", level: "public" },
      ]);
      assert.equal(deriveLevel(config, { wing: "acme", repo: "vault" }).level, "confidential");
    },
  );

  test("Given a repo matching a default glob `client-*`, When derived, Then confidential beats a looser wing", () => {
    const derived = deriveLevel(config, { wing: "acme", repo: "client-bank" });
    assert.equal(derived.level, "confidential");
    assert.deepEqual(derived.matched, [
      { source: "wing", key: "acme", level: "internal" },
      { source: "default", match: "client-*", against: "client-bank", level: "confidential" },
    ]);
  });

  test("Given a wing name matching a default glob, When derived, Then the default applies to the wing", () => {
    const derived = deriveLevel(config, { wing: "client-x" });
    assert.equal(derived.level, "confidential");
    assert.equal(derived.matched[0]?.source, "default");
  });

  test("Given only a looser default matching, When derived, Then its level applies, not the fallback", () => {
    const derived = deriveLevel(config, { repo: "docs-1" });
    assert.equal(derived.level, "public");
    assert.equal(derived.fallback, false);
  });

  test("Given a target nothing matches, When derived, Then the fallback applies", () => {
    const derived = deriveLevel(config, { wing: "nowhere", repo: "unknown" });
    assert.equal(derived.level, "internal");
    assert.equal(derived.fallback, true);
    assert.deepEqual(derived.matched, []);
    assert.equal(deriveLevel(config, {}).level, "internal");
  });

  test(
    "Given a name inherited from Object.prototype, When derived, Then it is " +
      "not a match unless the config names it",
    () => {
      assert.equal(deriveLevel(config, { repo: "toString" }).fallback, true);
      assert.equal(deriveLevel(config, { repo: "hasOwnProperty" }).fallback, true);
      assert.deepEqual(deriveLevel(config, { wing: "constructor" }).matched, [
        { source: "wing", key: "constructor", level: "public" },
      ]);
    },
  );

  test("Given a repo name differing only in case, When derived, Then it does not match (case-sensitive)", () => {
    assert.equal(deriveLevel(config, { repo: "VAULT" }).fallback, true);
    assert.equal(deriveLevel(config, { repo: "Client-bank" }).fallback, true);
  });
});

describe("globMatch", () => {
  test("Given `*` and `?`, When matched, Then `*` is any run and `?` exactly one character, anchored", () => {
    assert.ok(globMatch("client-*", "client-"));
    assert.ok(globMatch("client-*", "client-bank"));
    assert.ok(!globMatch("client-*", "my-client-bank"));
    assert.ok(globMatch("*-prod", "api-prod"));
    assert.ok(!globMatch("*-prod", "api-prod-2"));
    assert.ok(globMatch("a*b*c", "aXbYbZc"));
    assert.ok(!globMatch("a*b*c", "aXbYbZ"));
    assert.ok(globMatch("docs-?", "docs-1"));
    assert.ok(!globMatch("docs-?", "docs-"));
    assert.ok(!globMatch("docs-?", "docs-12"));
    assert.ok(globMatch("*", ""));
    assert.ok(globMatch("", ""));
    assert.ok(!globMatch("", "a"));
    assert.ok(globMatch("?", "é"));
  });

  test("Given regex metacharacters in a glob, When matched, Then they are literal", () => {
    assert.ok(!globMatch("a.b", "axb"));
    assert.ok(globMatch("a.b", "a.b"));
    assert.ok(!globMatch("a+", "aa"));
    assert.ok(globMatch("a+", "a+"));
    assert.ok(!globMatch("[ab]", "a"));
    assert.ok(globMatch("[ab]", "[ab]"));
    assert.ok(!globMatch("(a|b)", "a"));
    assert.ok(globMatch("^a$", "^a$"));
    assert.ok(!globMatch("^a$", "a"));
    assert.ok(globMatch("\\d*", "\\dx"));
    assert.ok(!globMatch("\\d", "1"));
    assert.ok(!globMatch(".*", "anything"));
  });

  test("Given a pathological pattern, When matched, Then it finishes quickly", () => {
    const started = Date.now();
    assert.ok(!globMatch("*a*a*a*a*a*a*a*a*a*a*b", "a".repeat(5000)));
    assert.ok(Date.now() - started < 2000);
  });

  test("Given a config default with a regex-looking glob, When derived, Then only the literal name matches", () => {
    const config = parse('schemaVersion: 1\nfallback: public\ndefaults:\n  - match: "a.b"\n    level: confidential\n');
    assert.equal(deriveLevel(config, { repo: "axb" }).level, "public");
    assert.equal(deriveLevel(config, { repo: "a.b" }).level, "confidential");
  });
});

describe("effectiveClassification", () => {
  test("Given a current config that tightens, When combined, Then the tighter level is effective", () => {
    const result = effectiveClassification({ declared: "internal", pinned: "internal", current: "confidential" });
    assert.deepEqual(result, {
      declared: "internal",
      pinned: "internal",
      current: "confidential",
      effective: "confidential",
      mismatch: false,
    });
  });

  test("Given a current config that loosens, When combined, Then the pinned level still applies", () => {
    const result = effectiveClassification({ declared: "public", pinned: "confidential", current: "public" });
    assert.equal(result.effective, "confidential");
    assert.equal(
      effectiveClassification({ declared: "internal", pinned: "internal", current: "public" }).effective,
      "internal",
    );
  });

  test("Given no current config, When combined, Then the strictest of declared and pinned, current null", () => {
    assert.deepEqual(effectiveClassification({ declared: "confidential", pinned: "public" }), {
      declared: "confidential",
      pinned: "public",
      current: null,
      effective: "confidential",
      mismatch: true,
    });
  });

  test("Given declared differs from pinned, When combined, Then mismatch is flagged; equal, Then not", () => {
    assert.equal(effectiveClassification({ declared: "public", pinned: "internal" }).mismatch, true);
    assert.equal(
      effectiveClassification({ declared: "internal", pinned: "internal", current: "confidential" }).mismatch,
      false,
    );
  });

  test("Given a value that is not a level, When combined, Then invalid-input", () => {
    assert.throws(() => effectiveClassification({ declared: "secret" as never, pinned: "public" }), {
      code: "invalid-input",
    });
  });
});

describe("classificationGate", () => {
  const config = parse(FULL);

  test("Given a confidential capture and a sovereign principal, When gated, Then allowed", () => {
    assert.deepEqual(classificationGate({ effective: "confidential", principal: "alice@box", config }), {
      allowed: true,
    });
  });

  test("Given a confidential capture and a non-sovereign principal, When gated, Then classification-refused", () => {
    assert.throws(
      () => classificationGate({ effective: "confidential", principal: "bob@box", config }),
      (error: unknown) =>
        error instanceof OatsError &&
        error.code === "classification-refused" &&
        error.kind === "refused" &&
        error.details["principal"] === "bob@box",
    );
  });

  test("Given a confidential capture and an unknown principal, When gated, Then classification-refused", () => {
    for (const principal of ["mallory@box", "", "constructor", "toString", "__proto__", "alice@BOX"]) {
      assert.throws(
        () => classificationGate({ effective: "confidential", principal, config }),
        { code: "classification-refused" },
        principal,
      );
    }
  });

  test("Given an internal or public capture, When gated by anyone, Then allowed", () => {
    for (const effective of ["public", "internal"] as const) {
      for (const principal of ["alice@box", "bob@box", "mallory@box"]) {
        assert.deepEqual(classificationGate({ effective, principal, config }), { allowed: true });
      }
    }
  });
});

describe("currentPrincipal", () => {
  test(
    "Given USER, LOGNAME and OATS_PRINCIPAL set, When the principal is " +
      "derived, Then it is still the OS account and host",
    () => {
      const expected = `${userInfo().username}@${hostname()}`;
      const saved = {
        USER: process.env["USER"],
        LOGNAME: process.env["LOGNAME"],
        OATS_PRINCIPAL: process.env["OATS_PRINCIPAL"],
        HOSTNAME: process.env["HOSTNAME"],
      };
      try {
        process.env["USER"] = "alice";
        process.env["LOGNAME"] = "alice";
        process.env["OATS_PRINCIPAL"] = "alice@box";
        process.env["HOSTNAME"] = "box";
        assert.equal(currentPrincipal(), expected);
        assert.notEqual(currentPrincipal(), "alice@box");
      } finally {
        for (const [key, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[key];
          else process.env[key] = value;
        }
      }
    },
  );
});
