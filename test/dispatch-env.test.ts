/**
 * The environment of a dispatch plan (captures/dispatch-env.ts), a pure
 * function: pinned values, the named credentials and nothing else of the
 * caller's, the Node guard last, and an unmaskable credential refused by
 * name, never by value.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { dispatchEnvironment } from "../src/captures/dispatch-env.js";
import { nodeOptionsWithGuard } from "../src/captures/node-guard.js";

const GUARD = "file:///run/copy/guard.mjs";
const ROOT = "/run/copy/tree";

test(
  "Given pinned env and named credentials, When the environment is built, " +
    "Then it holds exactly those (present ones provided, absent ones " +
    "missing) and the guard",
  () => {
    const built = dispatchEnvironment(
      {
        env: { PATH: "/usr/bin", NODE_OPTIONS: "--max-old-space-size=64" },
        credentials: [
          { kind: "env", name: "API_TOKEN" },
          { kind: "env", name: "ABSENT" },
        ],
      },
      { API_TOKEN: "token-1234", HOME: "/root", SECRET_NOT_NAMED: "leak-me" },
      GUARD,
      ROOT,
    );
    assert.deepEqual(built, {
      env: {
        PATH: "/usr/bin",
        NODE_OPTIONS: nodeOptionsWithGuard("--max-old-space-size=64", GUARD),
        API_TOKEN: "token-1234",
      },
      provided: ["API_TOKEN"],
      missing: ["ABSENT"],
    });
  },
);

test(
  "Given a pinned variable and a credential named __proto__, When the " +
    "environment is built, Then each is an own key and the environment's " +
    "prototype is untouched",
  () => {
    const env = JSON.parse('{"__proto__":"pinned-value"}') as Record<string, string>;
    const source = JSON.parse('{"__proto__":"credential-1234"}') as Record<string, string>;
    const pinned = dispatchEnvironment({ env, credentials: [] }, {}, GUARD, ROOT);
    assert.equal(Object.getPrototypeOf(pinned.env), Object.prototype);
    assert.deepEqual(Object.keys(pinned.env), ["__proto__", "NODE_OPTIONS"]);
    assert.deepEqual(Object.getOwnPropertyDescriptor(pinned.env, "__proto__"), {
      value: "pinned-value",
      writable: true,
      enumerable: true,
      configurable: true,
    });
    const named = dispatchEnvironment(
      { env: {}, credentials: [{ kind: "env", name: "__proto__" }] },
      source,
      GUARD,
      ROOT,
    );
    assert.deepEqual(
      [named.provided, Object.getOwnPropertyDescriptor(named.env, "__proto__")?.value],
      [["__proto__"], "credential-1234"],
    );
  },
);

test(
  "Given a credential only on the source's prototype, When the environment " +
    "is built, Then it is missing, not provided",
  () => {
    const source = Object.create({ API_TOKEN: "inherited-1234" }) as Record<string, string>;
    const built = dispatchEnvironment(
      { env: {}, credentials: [{ kind: "env", name: "API_TOKEN" }] },
      source,
      GUARD,
      ROOT,
    );
    assert.deepEqual([built.provided, built.missing, "API_TOKEN" in built.env], [[], ["API_TOKEN"], false]);
  },
);

test(
  "Given a credential a run log could not mask, When the environment is " +
    "built, Then it is refused naming the variable, never the value",
  () => {
    for (const value of ["abc", "two\nlines-here"]) {
      assert.throws(
        () =>
          dispatchEnvironment(
            { env: {}, credentials: [{ kind: "env", name: "API_TOKEN" }] },
            { API_TOKEN: value },
            GUARD,
            ROOT,
          ),
        (error: unknown) => {
          assert.ok(error instanceof OatsError);
          assert.equal(error.code, "invalid-input");
          assert.equal(error.details["credential"], "API_TOKEN");
          assert.equal(error.details["reason"], "credential-unmaskable");
          assert.ok(!JSON.stringify(error.toJSON()).includes(value), "the value is never in the refusal");
          return true;
        },
      );
    }
  },
);
