import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { test } from "node:test";
import { DEFAULT_RETRY, isTransientStatus, retryDelay } from "../src/oci/retry.js";

/** The pure policy behind asking a registry again (src/oci/retry.ts); the session's use of it is tested against a
 * real registry in fleet-push-transient. */

const answer = (retryAfter?: string) =>
  ({ headers: retryAfter === undefined ? {} : { "retry-after": retryAfter } }) as unknown as IncomingMessage;

test(
  "Given the statuses a registry answers When classified Then only 429 and " +
    "the 5xx of a busy or briefly broken server are transient",
  () => {
    for (const status of [429, 500, 502, 503, 504]) assert.equal(isTransientStatus(status), true, String(status));
    for (const status of [200, 201, 202, 400, 401, 403, 404, 405, 409, 416, 501, 505])
      assert.equal(isTransientStatus(status), false, String(status));
  },
);

test("Given no Retry-After When retries follow one another Then the waits grow fourfold from 50 ms", () => {
  assert.deepEqual(
    [0, 1, 2].map((attempt) => retryDelay(DEFAULT_RETRY, attempt, answer())),
    [50, 200, 800],
  );
  assert.equal(retryDelay(DEFAULT_RETRY, 2), 800, "no response at all is the same");
});

test("Given a Retry-After in seconds When it is longer than the backoff Then it is honoured, up to the 5 s cap", () => {
  assert.equal(retryDelay(DEFAULT_RETRY, 0, answer("2")), 2000);
  assert.equal(retryDelay(DEFAULT_RETRY, 0, answer(" 3 ")), 3000);
  assert.equal(retryDelay(DEFAULT_RETRY, 0, answer("3600")), 5000, "a registry cannot park the client for an hour");
  assert.equal(retryDelay(DEFAULT_RETRY, 2, answer("0")), 800, "a shorter Retry-After does not cut the backoff");
});

test("Given a Retry-After that is not a count of seconds When read Then the backoff applies", () => {
  for (const header of ["Wed, 21 Oct 2026 07:28:00 GMT", "-1", "1.5", "", "9999999"])
    assert.equal(retryDelay(DEFAULT_RETRY, 1, answer(header)), 200, JSON.stringify(header));
});
