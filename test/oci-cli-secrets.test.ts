/**
 * Registry credentials never reach the operator's output, the records, the
 * audit log or anything else under a scope: `oats push` and `oats pull`
 * (the built CLI, real child processes) against a real registry that
 * requires Basic auth (htpasswd), with credentials from the environment and
 * from a Docker config.json, succeeding and failing.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readFileSync, readdirSync, lstatSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runJson, runOats, tempDir } from "./helpers.js";
import { HTPASSWD_SKIP, REGISTRY_PASSWORD, REGISTRY_USER, startRegistry, type Registry } from "./support/registry.js";

let registry: Registry;

before(async () => {
  if (!HTPASSWD_SKIP) registry = await startRegistry({ auth: "htpasswd" });
});
after(async () => {
  await registry?.stop();
});

const BASE64 = Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64");
const WRONG = "not-the-Password-0451";

/** Every byte of every regular file below `root`. */
function allBytes(root: string): string {
  const parts: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const stats = lstatSync(path);
      if (stats.isDirectory()) walk(path);
      else if (stats.isFile()) parts.push(readFileSync(path).toString("latin1"));
    }
  };
  walk(root);
  return parts.join("\n");
}

function assertClean(where: string, text: string): void {
  for (const secret of [
    REGISTRY_PASSWORD,
    BASE64,
    WRONG,
    Buffer.from(`${REGISTRY_USER}:${WRONG}`).toString("base64"),
  ]) {
    assert.ok(!text.includes(secret), `${where} holds a credential`);
  }
}

function captureScope(): { scope: string; spec: string } {
  const dir = tempDir("oats-secrets-");
  mkdirSync(join(dir, "tool/bin"), { recursive: true });
  writeFileSync(join(dir, "tool/bin/run"), "#!/bin/sh\necho ran\n");
  chmodSync(join(dir, "tool/bin/run"), 0o755);
  writeFileSync(
    join(dir, "class.yaml"),
    JSON.stringify({ schemaVersion: 1, wings: {}, repos: {}, defaults: [], fallback: "internal", principals: {} }) +
      "\n",
  );
  writeFileSync(
    join(dir, "spec.yaml"),
    JSON.stringify({
      name: "secrets",
      executable: { tree: "./tool", path: "bin/run", args: [] },
      target: { wing: "x" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      env: { PATH: "/usr/bin:/bin" },
    }) + "\n",
  );
  const scope = join(dir, "scope");
  mkdirSync(scope);
  return { scope, spec: join(dir, "spec.yaml") };
}

test(
  "oats push and pull with registry credentials: output, records and audit " + "never hold them, failing or succeeding",
  async (t) => {
    if (HTPASSWD_SKIP) return t.skip(HTPASSWD_SKIP);
    const { scope, spec } = captureScope();
    const prepared = runJson(["--scope", scope, "capture", "prepare", spec]);
    assert.equal(prepared.status, 0, prepared.stderr);
    const id = (prepared.envelope.result as { id: string }).id;
    const to = `http://${registry.host}/oats/secrets`;
    const home = tempDir("oats-home-");
    const env = (extra: Record<string, string>) => ({ HOME: home, DOCKER_CONFIG: join(home, ".docker"), ...extra });
    const outputs: string[] = [];

    // Anonymous and wrong credentials: refused as registry-refused (unauthorized), in JSON and in human mode.
    for (const extra of [{}, { OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: WRONG }] as Array<
      Record<string, string>
    >) {
      const json = runJson(["--scope", scope, "push", id, "--to", to], { env: env(extra) });
      assert.equal(json.envelope.error?.code, "registry-refused", json.stdout);
      assert.equal(json.envelope.error?.details["reason"], "unauthorized");
      const human = runOats(["--scope", scope, "push", id, "--to", to], { env: env(extra) });
      assert.equal(human.status, 6, human.stderr);
      outputs.push(json.stdout, json.stderr, human.stdout, human.stderr);
    }
    // Right credentials from the environment, then from config.json: push, then pull into a fresh scope.
    const pushed = runJson(["--scope", scope, "push", id, "--to", to], {
      env: env({ OATS_REGISTRY_USER: REGISTRY_USER, OATS_REGISTRY_PASSWORD: REGISTRY_PASSWORD }),
    });
    assert.equal(pushed.status, 0, pushed.stdout + pushed.stderr);
    outputs.push(pushed.stdout, pushed.stderr);
    mkdirSync(join(home, ".docker"), { recursive: true });
    writeFileSync(join(home, ".docker/config.json"), JSON.stringify({ auths: { [registry.host]: { auth: BASE64 } } }));
    const other = join(tempDir("oats-secrets-b-"), "scope");
    mkdirSync(other);
    const tags = (pushed.envelope.result as { manifests: Array<{ tags: string[] }> }).manifests.flatMap((m) => m.tags);
    assert.ok(tags.length > 0, pushed.stdout);
    const pulled = runJson(["--scope", other, "pull", `${to}:${tags[0]}`], { env: env({}) });
    assert.equal(pulled.status, 0, pulled.stdout + pulled.stderr);
    const human = runOats(["--scope", other, "pull", `${to}:${tags[0]}`], { env: env({}) });
    outputs.push(pulled.stdout, pulled.stderr, human.stdout, human.stderr);

    assertClean("the CLI's output", outputs.join("\n"));
    assertClean("the pushing scope", allBytes(scope));
    assertClean("the pulling scope", allBytes(other));
  },
);
