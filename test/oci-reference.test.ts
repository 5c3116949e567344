import assert from "node:assert/strict";
import { test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { formatOciReference, isLoopbackHost, OciClient, parseOciReference } from "../src/oci/index.js";
import { refusal } from "./support/refusals.js";

const DIGEST = `sha256:${"ab".repeat(32)}`;

test("OCI references: host, port, nested repository, tag and digest", () => {
  assert.deepEqual(parseOciReference("oci://registry.example.com/team/oats/captures:run-1"), {
    registry: { hostname: "registry.example.com", port: null, host: "registry.example.com", scheme: "https" },
    repository: "team/oats/captures",
    tag: "run-1",
    digest: null,
  });
  const pinned = parseOciReference(`oci://127.0.0.1:5000/a.b_c__d--e/f@${DIGEST}`);
  assert.equal(pinned.registry.port, 5000);
  assert.equal(pinned.repository, "a.b_c__d--e/f");
  assert.equal(pinned.digest, DIGEST);
  assert.equal(pinned.tag, null);
  const both = parseOciReference(`oci://[::1]:5000/repo:v1@${DIGEST}`);
  assert.equal(both.registry.hostname, "::1");
  assert.equal(both.registry.host, "[::1]:5000");
  assert.equal(formatOciReference(both), `oci://[::1]:5000/repo:v1@${DIGEST}`);
  assert.equal(parseOciReference("http://localhost:5000/repo").registry.scheme, "http");
});

test("OCI references: bad input is invalid-artifact-reference and a reference with credentials is never echoed", () => {
  const bad = [
    "registry.example.com/repo",
    "https://registry.example.com/repo",
    "oci://registry.example.com",
    "oci://registry.example.com/",
    "oci://registry.example.com/Upper",
    "oci://registry.example.com/repo/",
    "oci://registry.example.com/-repo",
    "oci://registry.example.com/re..po",
    "oci://registry.example.com/repo:",
    "oci://registry.example.com/repo:-tag",
    `oci://registry.example.com/repo:${"t".repeat(129)}`,
    "oci://registry.example.com/repo@sha256:abc",
    `oci://registry.example.com/repo@sha512:${"ab".repeat(64)}`,
    "oci://registry.example.com:0/repo",
    "oci://registry.example.com:70000/repo",
    "oci://bad_host/repo",
    "oci://[::1/repo",
    `oci://registry.example.com/${"a/".repeat(130)}a`,
    "oci://registry.example.com/repo?x=1",
    "oci://registry.example.com/repo#frag",
  ];
  for (const text of bad) {
    assert.throws(() => parseOciReference(text), refusal("invalid-artifact-reference"), text);
  }
  assert.throws(
    () => parseOciReference("oci://alice:hunter2-secret@registry.example.com/repo"),
    (error: unknown) =>
      error instanceof OatsError &&
      error.code === "invalid-artifact-reference" &&
      !JSON.stringify(error.toJSON()).includes("hunter2"),
  );
});

test("loopback is exactly 127.0.0.0/8, ::1 and localhost", () => {
  for (const host of ["127.0.0.1", "127.255.0.9", "::1", "[::1]", "localhost", "LOCALHOST", "::ffff:127.0.0.1"])
    assert.ok(isLoopbackHost(host), host);
  for (const host of [
    "128.0.0.1",
    "10.0.0.1",
    "::2",
    "localhost.example.com",
    "evil.localhost",
    "127.0.0.1.nip.io",
    "0.0.0.0",
    "::ffff:10.0.0.1",
  ])
    assert.ok(!isLoopbackHost(host), host);
});

test("plain HTTP to a remote registry is refused before any byte is sent: http:// and --insecure alike", () => {
  for (const [text, insecure] of [
    ["http://registry.example.com/repo", false],
    ["oci://registry.example.com/repo", true],
    ["http://10.0.0.1:5000/repo", false],
    ["http://127.0.0.1.nip.io:5000/repo", false],
  ] as const) {
    assert.throws(
      () => new OciClient(text, { insecure }),
      (error: unknown) =>
        error instanceof OatsError &&
        error.code === "registry-refused" &&
        error.details["reason"] === "insecure-remote",
      text,
    );
  }
  assert.equal(new OciClient("oci://127.0.0.1:5000/repo", { insecure: true }).session.origin, "http://127.0.0.1:5000");
  assert.equal(new OciClient("oci://registry.example.com/repo").session.origin, "https://registry.example.com");
});
