import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { inspect } from "node:util";
import { after, before, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { bufferSource, OciClient, resolveCredentials } from "../src/oci/index.js";
import { tempDir } from "./helpers.js";
import { startFakeRegistry } from "./support/fake-registry.js";
import {
  HTPASSWD_SKIP,
  NO_REGISTRY,
  REGISTRY_PASSWORD,
  REGISTRY_USER,
  registryBinary,
  sha256,
  startRegistry,
  type Registry,
} from "./support/registry.js";
import { refusal } from "./support/refusals.js";

/** Auth against real registries (htpasswd Basic, the token flow, TLS) and the credential sources. */

const HAVE = registryBinary() !== null;
let basic: Registry;
let token: Registry;
let tls: Registry;

before(async () => {
  if (!HAVE) return;
  [basic, token, tls] = await Promise.all([
    HTPASSWD_SKIP ? (null as unknown as Registry) : startRegistry({ auth: "htpasswd" }),
    startRegistry({ auth: "token" }),
    startRegistry({ tls: true }),
  ]);
});
after(async () => {
  await Promise.all([basic?.stop(), token?.stop(), tls?.stop()]);
});

const BASE64 = Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64");

/** An environment with no credential source but what the test puts in it. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const home = tempDir("oats-home-");
  return { PATH: process.env["PATH"], HOME: home, DOCKER_CONFIG: join(home, ".docker"), ...extra };
}

function assertNoSecret(error: unknown, ...secrets: string[]): void {
  const seen = [
    inspect(error, { depth: 20, showHidden: true }),
    error instanceof OatsError ? JSON.stringify(error.toJSON()) : "",
    (error as Error)?.stack ?? "",
    String((error as Error)?.cause ?? ""),
  ].join("\n");
  for (const secret of [REGISTRY_PASSWORD, BASE64, ...secrets])
    assert.ok(!seen.includes(secret), `the error shows a secret: ${seen.slice(0, 400)}`);
}

/** A refusal (with `reason`, when given) that shows no secret: neither the registry's nor any of `secrets`. */
const secretFreeRefusal = (code: string, reason?: string, ...secrets: string[]) =>
  refusal(code, reason, (error) => assertNoSecret(error, ...secrets));

async function roundTrip(client: OciClient): Promise<void> {
  const bytes = randomBytes(2000);
  await client.putBlob(bufferSource(bytes, sha256(bytes)), { chunked: true, chunkSize: 700 });
  assert.deepEqual(await client.headBlob(sha256(bytes)), { size: 2000 });
  assert.ok((await client.getBlobBytes(sha256(bytes), { maxBytes: 4096 })).equals(bytes));
}

test(
  "Basic auth (htpasswd): anonymous and wrong credentials are refused, " +
    "OATS_REGISTRY_USER/PASSWORD work, no secret in any error",
  async (t) => {
    if (HTPASSWD_SKIP) return t.skip(HTPASSWD_SKIP);
    const digest = sha256(Buffer.from("x"));
    await assert.rejects(
      new OciClient(basic.ref("oats/auth"), { env: cleanEnv() }).headBlob(digest),
      secretFreeRefusal("registry-refused", "unauthorized"),
    );
    await assert.rejects(
      new OciClient(basic.ref("oats/auth"), {
        env: cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: "wrong-password-here" }),
      }).headBlob(digest),
      secretFreeRefusal("registry-refused", "unauthorized", "wrong-password-here"),
    );
    await assert.rejects(
      new OciClient(basic.ref("oats/auth"), { env: cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER }) }).headBlob(digest),
      secretFreeRefusal("invalid-input"),
    );
    await roundTrip(
      new OciClient(basic.ref("oats/auth"), {
        env: cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: REGISTRY_PASSWORD }),
      }),
    );
  },
);

test(
  "the token flow (WWW-Authenticate: Bearer) against a real registry: the " +
    "token service gets Basic credentials and the push scope",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    await assert.rejects(
      new OciClient(token.ref("oats/token"), { env: cleanEnv() }).headBlob(sha256(Buffer.from("x"))),
      secretFreeRefusal("registry-refused", "unauthorized"),
    );
    assert.equal(token.tokenRequests.at(-1)?.authorized, false);
    await roundTrip(
      new OciClient(token.ref("oats/token"), {
        env: cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: REGISTRY_PASSWORD }),
      }),
    );
    const scopes = token.tokenRequests.filter((r) => r.authorized).flatMap((r) => r.scopes);
    assert.ok(
      scopes.includes("repository:oats/token:pull,push") ||
        scopes.some((s) => /^repository:oats\/token:.*push/.test(s)),
      JSON.stringify(scopes),
    );
  },
);

test(
  "credentials from a Docker config.json: auths entry, credHelpers and " + "credsStore (a helper run without a shell)",
  async (t) => {
    if (HTPASSWD_SKIP) return t.skip(HTPASSWD_SKIP);
    const env = cleanEnv();
    const dockerDir = env["DOCKER_CONFIG"]!;
    mkdirSync(dockerDir, { recursive: true });
    writeFileSync(
      join(dockerDir, "config.json"),
      JSON.stringify({ auths: { [`http://${basic.host}/v1/`]: { auth: BASE64 } } }),
    );
    await roundTrip(new OciClient(basic.ref("oats/config"), { env }));

    // A credential helper on PATH that records what it was asked.
    const bin = tempDir("oats-bin-");
    const asked = join(bin, "asked");
    writeFileSync(
      join(bin, "docker-credential-oatstest"),
      `#!/bin/sh\n[ "$1" = get ] || exit 3\ncat > '${asked}'\nprintf ` +
        `'{"ServerURL":"x","Username":"%s","Secret":"%s"}' '${REGISTRY_USER}' ` +
        `'${REGISTRY_PASSWORD}'\n`,
    );
    chmodSync(join(bin, "docker-credential-oatstest"), 0o755);
    const helperEnv = { ...env, PATH: `${bin}:${process.env["PATH"]}` };
    writeFileSync(
      join(dockerDir, "config.json"),
      JSON.stringify({
        credHelpers: { [basic.host]: "oatstest" },
        auths: { [basic.host]: { auth: Buffer.from("wrong:wrong").toString("base64") } },
      }),
    );
    await roundTrip(new OciClient(basic.ref("oats/helper"), { env: helperEnv }));
    assert.equal(readFileSync(asked, "utf8"), basic.host);
    writeFileSync(join(dockerDir, "config.json"), JSON.stringify({ credsStore: "oatstest" }));
    assert.deepEqual(await resolveCredentials(basic.host, { env: helperEnv }), {
      username: REGISTRY_USER,
      password: REGISTRY_PASSWORD,
      source: "credential helper docker-credential-oatstest",
    });

    // A helper name is a plain name, never a command line.
    const marker = join(bin, "pwned");
    writeFileSync(join(dockerDir, "config.json"), JSON.stringify({ credsStore: `x; touch ${marker}` }));
    await assert.rejects(
      resolveCredentials(basic.host, { env: helperEnv }),
      (error: unknown) =>
        secretFreeRefusal("invalid-input")(error) && /not a plain name/.test((error as Error).message),
    );
    assert.throws(() => readFileSync(marker));
    // A helper that fails, or answers nonsense, is refused without echoing what it printed.
    writeFileSync(join(bin, "docker-credential-oatsbad"), `#!/bin/sh\necho '${REGISTRY_PASSWORD}'\n`);
    chmodSync(join(bin, "docker-credential-oatsbad"), 0o755);
    writeFileSync(join(dockerDir, "config.json"), JSON.stringify({ credsStore: "oatsbad" }));
    await assert.rejects(resolveCredentials(basic.host, { env: helperEnv }), secretFreeRefusal("invalid-input"));
    writeFileSync(join(dockerDir, "config.json"), JSON.stringify({ credsStore: "absent-helper" }));
    await assert.rejects(resolveCredentials(basic.host, { env: helperEnv }), secretFreeRefusal("invalid-input"));
    // A config file that is not JSON is refused without quoting it.
    writeFileSync(join(dockerDir, "config.json"), `{"auths": {"${basic.host}": {"auth": "${BASE64}"`);
    await assert.rejects(resolveCredentials(basic.host, { env: helperEnv }), secretFreeRefusal("invalid-input"));
    // Podman's auth file comes first.
    writeFileSync(join(bin, "auth.json"), JSON.stringify({ auths: { [basic.host]: { auth: BASE64 } } }));
    assert.equal(
      (await resolveCredentials(basic.host, { env: { ...helperEnv, REGISTRY_AUTH_FILE: join(bin, "auth.json") } }))
        ?.username,
      REGISTRY_USER,
    );
  },
);

test(
  "a TLS registry whose certificate the system CA store does not trust is " + "registry-refused (tls), nothing sent",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const client = new OciClient(tls.ref("oats/tls"), {
      env: cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: REGISTRY_PASSWORD }),
    });
    assert.equal(client.session.origin, `https://${tls.host}`);
    await assert.rejects(client.headBlob(sha256(Buffer.from("x"))), secretFreeRefusal("registry-refused", "tls"));
    await assert.rejects(
      client.putBlob(bufferSource(Buffer.from("x"), sha256(Buffer.from("x")))),
      secretFreeRefusal("registry-refused", "tls"),
    );
  },
);

test(
  "the same TLS registry is used over HTTPS once its CA is in the trust " +
    "store (NODE_EXTRA_CA_CERTS, in a child process)",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", join(import.meta.dirname, "support/oci-child.ts"), tls.ref("oats/tls")],
      {
        encoding: "utf8",
        env: { ...cleanEnv(), NODE_EXTRA_CA_CERTS: tls.certificate! },
        cwd: join(import.meta.dirname, ".."),
      },
    );
    assert.deepEqual(JSON.parse(child.stdout), { ok: true, origin: `https://${tls.host}` }, child.stderr);
  },
);

test(
  "a Bearer realm that is plain HTTP off loopback, or absent, is refused " + "before any credential leaves",
  async (t) => {
    const env = cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: REGISTRY_PASSWORD });
    for (const challenge of [
      'Bearer realm="http://auth.example.com/token",service="r",scope="repository:oats/fleet:pull"',
      'Bearer service="r"',
      "Negotiate abc",
      "",
    ]) {
      const registry = await startFakeRegistry((_request, response) =>
        response.writeHead(401, challenge ? { "www-authenticate": challenge } : {}).end(),
      );
      t.after(() => registry.close());
      await assert.rejects(
        new OciClient(`http://${registry.host}/oats/fleet`, { env }).headBlob(sha256(Buffer.from("x"))),
        secretFreeRefusal("registry-refused", challenge.startsWith("Bearer") ? "auth-realm" : "unauthorized"),
      );
      assert.equal(registry.requests.length, 1);
      assert.equal(registry.requests[0]!.headers.authorization, undefined);
    }
  },
);

test(
  "a hostile registry that echoes the request, or hands out a token with a " +
    "line break, never gets a secret into an error",
  async (t) => {
    const env = cleanEnv({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: REGISTRY_PASSWORD });
    const echo = await startFakeRegistry((request, response) => {
      if (!request.headers.authorization) response.writeHead(401, { "www-authenticate": 'Basic realm="x"' }).end();
      else
        response.writeHead(400, { "content-type": "application/json" }).end(
          JSON.stringify({
            errors: [{ code: "DENIED", message: request.headers.authorization, detail: REGISTRY_PASSWORD }],
          }),
        );
    });
    t.after(() => echo.close());
    await assert.rejects(
      new OciClient(`http://${echo.host}/oats/fleet`, { env }).putManifest(
        "v1",
        Buffer.from('{"schemaVersion":2}'),
        "application/vnd.oci.image.manifest.v1+json",
      ),
      secretFreeRefusal("registry-refused", "protocol"),
    );
    const split = await startFakeRegistry((request, response) => {
      if (request.url?.startsWith("/token")) response.writeHead(200).end(JSON.stringify({ token: "abc\r\nX-Evil: 1" }));
      else
        response
          .writeHead(401, { "www-authenticate": `Bearer realm="http://${request.headers.host}/token",service="s"` })
          .end();
    });
    t.after(() => split.close());
    await assert.rejects(
      new OciClient(`http://${split.host}/oats/fleet`, { env }).headBlob(sha256(Buffer.from("x"))),
      secretFreeRefusal("registry-refused", "protocol"),
    );
  },
);
