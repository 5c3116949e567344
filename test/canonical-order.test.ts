import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJson, compareUtf8 } from "../src/core/canonical-json.js";

/** compareUtf8 must order exactly as Buffer.compare of the UTF-8 bytes, without encoding. */

const ALPHABET = [
  "a",
  "b",
  "A",
  "~",
  "\u0000",
  "\u00e9",
  "\u07ff",
  "\u0800",
  "\uD7FF",
  "\uE000",
  "\uFFFD",
  "\uFFFF",
  "\u{10000}",
  "\u{1F600}",
  "\u{1F601}",
  "\u{10FFFF}",
  "日",
];

function randomString(seed: { value: number }): string {
  const next = () => (seed.value = (seed.value * 1103515245 + 12345) % 2 ** 31);
  let out = "";
  for (let length = next() % 5; length > 0; length--) out += ALPHABET[next() % ALPHABET.length];
  return out;
}

test(
  "Given random strings across the BMP and astral planes, When compared, " +
    "Then compareUtf8 agrees with UTF-8 byte order",
  () => {
    const seed = { value: 42 };
    for (let i = 0; i < 5000; i++) {
      const a = randomString(seed);
      const b = randomString(seed);
      assert.equal(
        Math.sign(compareUtf8(a, b)),
        Math.sign(Buffer.compare(Buffer.from(a), Buffer.from(b))),
        `${JSON.stringify(a)} vs ${JSON.stringify(b)}`,
      );
    }
  },
);

test("Given keys whose UTF-16 and UTF-8 orders differ, When canonicalised, Then keys follow UTF-8 bytes", () => {
  // U+E000 sorts after U+1F600 in UTF-16 units (0xE000 > 0xD83D) but before it in UTF-8 (EE < F0).
  assert.equal(
    canonicalJson({ "\u{1F600}": 1, "\uE000": 2, "\u{1F601}": 3 }),
    '{"\uE000":2,"\u{1F600}":1,"\u{1F601}":3}\n',
  );
});
