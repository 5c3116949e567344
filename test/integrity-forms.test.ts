/**
 * Integrities in every form a user holds one: the object digestTree returns, the prefixed text, the store's
 * path segment, and the `{format, value}` object; a bare `sha256-...` is the legacy format, and where the
 * exec format was meant the refusal says which prefix to write.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { isOatsError } from "../src/core/index.js";
import {
  digestTree,
  integrityText,
  parseIntegrity,
  retainTree,
  TREE_EXEC,
  TREE_LEGACY,
  verifyTree,
} from "../src/index.js";
import { fixtureCopy, tempDir } from "./helpers.js";

const VALUE = `sha256-${"ab".repeat(32)}`;

async function refusal(run: () => unknown): Promise<{ code: string; message: string }> {
  try {
    await run();
  } catch (error) {
    assert.ok(isOatsError(error), String(error));
    return { code: error.code, message: error.message };
  }
  assert.fail("expected a refusal");
}

describe("parseIntegrity takes each form a user holds", () => {
  test("the prefixed text and the {format, value} object", () => {
    assert.deepEqual(parseIntegrity(`${TREE_EXEC}:${VALUE}`), { format: TREE_EXEC, value: VALUE });
    assert.deepEqual(parseIntegrity({ format: TREE_EXEC, value: VALUE }), { format: TREE_EXEC, value: VALUE });
  });

  test("the store's path segment tree-exec-v1/sha256-...", () => {
    assert.deepEqual(parseIntegrity(`tree-exec-v1/${VALUE}`), { format: TREE_EXEC, value: VALUE });
    assert.deepEqual(parseIntegrity(`package-payload-exec-v1/${VALUE}`), {
      format: "oats.package-payload-exec.v1",
      value: VALUE,
    });
  });

  test("the object digestTree returns: its exec digest", async () => {
    const digests = await digestTree(fixtureCopy(), [TREE_LEGACY, TREE_EXEC]);
    assert.deepEqual(parseIntegrity(digests), { format: TREE_EXEC, value: digests[TREE_EXEC] });
    const legacyOnly = await digestTree(fixtureCopy(), [TREE_LEGACY]);
    assert.deepEqual(parseIntegrity(legacyOnly), { format: TREE_LEGACY, value: legacyOnly[TREE_LEGACY] });
  });

  test("a bare sha256-... stays the legacy format", () => {
    assert.deepEqual(parseIntegrity(VALUE), { format: TREE_LEGACY, value: VALUE });
  });

  test("an unknown segment, an abbreviated digest and an empty object are refused", async () => {
    for (const input of [`tree-exec-v9/${VALUE}`, `tree-exec-v1/${VALUE.slice(0, 20)}`, {}])
      assert.equal((await refusal(() => parseIntegrity(input))).code, "invalid-artifact-reference");
  });
});

describe("a retained tree is named by every form", () => {
  test("retainTree expects and verifyTree finds a revision by digestTree's object, text or segment", async () => {
    const scope = tempDir();
    const source = fixtureCopy();
    const digests = await digestTree(source, [TREE_EXEC]);
    const text = `${TREE_EXEC}:${digests[TREE_EXEC]}`;
    const receipt = await retainTree(scope, { kind: "capture", key: "cap", source, expect: digests });
    assert.equal(integrityText(parseIntegrity(receipt.integrity)), text);
    for (const integrity of [digests, text, `tree-exec-v1/${digests[TREE_EXEC]}`])
      await verifyTree(scope, { kind: "capture", key: "cap", integrity });
  });

  test("a bare exec digest is refused with the prefix that was meant", async () => {
    const scope = tempDir();
    const source = fixtureCopy();
    const exec = (await digestTree(source, [TREE_EXEC]))[TREE_EXEC]!;
    const retain = await refusal(() => retainTree(scope, { kind: "capture", key: "cap", source, expect: exec }));
    assert.equal(retain.code, "invalid-artifact-reference");
    assert.ok(retain.message.includes(`write ${TREE_EXEC}:${exec}`), retain.message);
    await retainTree(scope, { kind: "capability", key: "cap", source, expect: `${TREE_EXEC}:${exec}` });
    const verify = await refusal(() => verifyTree(scope, { kind: "capability", key: "cap", integrity: exec }));
    assert.ok(verify.message.includes(`write ${TREE_EXEC}:${exec}`), verify.message);
  });
});
