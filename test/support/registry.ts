import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createHash, createPrivateKey, randomBytes, sign, X509Certificate } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { join } from "node:path";
import { tempDir } from "../helpers.js";

/**
 * A real CNCF distribution registry (Debian's `docker-registry`, 2.8) for
 * the tests: started on 127.0.0.1 and a free port with a temporary storage
 * directory and a minimal config, waited for until /v2/ answers, stopped by
 * `stop()`. Modes: plain HTTP (default); `auth: "htpasswd"` (bcrypt hash
 * made with python3's crypt, the only bcrypt on this machine without a new
 * npm dependency); `auth: "token"` (the distribution token flow against a
 * token server in this process that signs RS256 JWTs with a throwaway
 * openssl certificate the registry trusts); `tls: true` (a self-signed
 * openssl certificate for 127.0.0.1, which no system CA store trusts).
 */

export const REGISTRY_USER = "oats-fleet";
export const REGISTRY_PASSWORD = "s3cret-Registry-Pa55word";

export interface RegistryOptions {
  readonly auth?: "htpasswd" | "token";
  readonly tls?: boolean;
}

export interface Registry {
  /** `127.0.0.1:<port>` */
  readonly host: string;
  readonly port: number;
  /** The storage root (`docker/registry/v2/...` below it). */
  readonly root: string;
  /** The self-signed certificate in TLS mode. */
  readonly certificate: string | null;
  /** Token requests the token server answered (token mode), with the scopes asked for. */
  readonly tokenRequests: Array<{ authorized: boolean; scopes: string[] }>;
  /** `http://127.0.0.1:<port>/<repository>` (or `oci://` in TLS mode). */
  ref(repository: string, suffix?: string): string;
  /** Where the registry keeps a blob's bytes. */
  blobPath(digest: string): string;
  stop(): Promise<void>;
}

/** The registry binary, or null when this machine truly has none. */
export function registryBinary(): string | null {
  for (const name of ["docker-registry", "registry"]) {
    const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", name], { encoding: "utf8" });
    if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
  }
  return null;
}

export const NO_REGISTRY =
  "docker-registry (Debian package docker-registry, CNCF distribution 2.8) " +
  "is not installed: .ci/run installs it; `apt-get install -y " +
  "docker-registry` to run these tests";

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

function selfSigned(dir: string, cn: string, san: string): { cert: string; key: string } {
  const cert = join(dir, `${cn}.crt`);
  const key = join(dir, `${cn}.key`);
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "2",
      "-subj",
      `/CN=${cn}`,
      "-addext",
      `subjectAltName=${san}`,
    ],
    { stdio: "ignore" },
  );
  return { cert, key };
}

function base64url(data: Buffer | string): string {
  return Buffer.from(data).toString("base64url");
}

/** A token server for the registry's `auth.token` mode: Basic credentials in, an RS256 JWT with the asked-for access
 * out. */
async function startTokenServer(
  dir: string,
  requests: Registry["tokenRequests"],
): Promise<{ port: number; cert: string; close(): Promise<void> }> {
  const { cert, key } = selfSigned(dir, "oats-token-issuer", "DNS:oats-token-issuer");
  const der = new X509Certificate(readFileSync(cert)).raw;
  const privateKey = createPrivateKey(readFileSync(key));
  const expected = `Basic ${Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64")}`;
  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://127.0.0.1");
    const scopes = url.searchParams.getAll("scope");
    const authorized = request.headers.authorization === expected;
    requests.push({ authorized, scopes });
    if (!authorized) {
      response.writeHead(401, { "www-authenticate": 'Basic realm="oats-token"' }).end();
      return;
    }
    const access = scopes.map((scope) => {
      const [type, name, actions] = scope.split(":");
      return { type, name, actions: (actions ?? "").split(",").filter(Boolean) };
    });
    const now = Math.floor(Date.now() / 1000);
    const header = base64url(JSON.stringify({ typ: "JWT", alg: "RS256", x5c: [der.toString("base64")] }));
    const claims = base64url(
      JSON.stringify({
        iss: "oats-test-issuer",
        sub: REGISTRY_USER,
        aud: "oats-test-registry",
        exp: now + 600,
        nbf: now - 60,
        iat: now,
        jti: randomBytes(8).toString("hex"),
        access,
      }),
    );
    const signature = base64url(sign("sha256", Buffer.from(`${header}.${claims}`), privateKey));
    response
      .writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ token: `${header}.${claims}.${signature}` }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    cert,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A bcrypt hash of the test password: python3's crypt module (gone in Python 3.13), else apache2-utils' `htpasswd
 * -B`; null when neither works. */
function bcryptHash(): string | null {
  const python = spawnSync(
    "python3",
    [
      "-W",
      "ignore",
      "-c",
      "import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
      REGISTRY_PASSWORD,
    ],
    { encoding: "utf8" },
  );
  const fromPython = python.status === 0 ? (python.stdout ?? "").trim() : "";
  if (/^\$2[aby]\$/.test(fromPython)) return fromPython;
  const apache = spawnSync("htpasswd", ["-nbB", REGISTRY_USER, REGISTRY_PASSWORD], { encoding: "utf8" });
  const fromApache = apache.status === 0 ? ((apache.stdout ?? "").trim().split(":")[1] ?? "") : "";
  return /^\$2[aby]\$/.test(fromApache) ? fromApache : null;
}

const HASH = bcryptHash();

/** Why the htpasswd mode cannot run here, or null when it can. */
export const HTPASSWD_SKIP: string | null =
  registryBinary() === null
    ? NO_REGISTRY
    : HASH === null
      ? "no bcrypt hash generator (python3's crypt module, or htpasswd -B from " +
        "apache2-utils) for the registry's htpasswd auth"
      : null;

function htpasswdLine(): string {
  if (HASH === null) throw new Error(HTPASSWD_SKIP ?? "no bcrypt");
  return `${REGISTRY_USER}:${HASH}\n`;
}

function waitReady(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 15_000;
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      if (child.exitCode !== null) {
        reject(new Error(`docker-registry exited (${child.exitCode}): ${output()}`));
        return;
      }
      const socket = net.connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve();
      });
      socket.once("error", () => {
        socket.destroy();
        if (Date.now() > deadline) reject(new Error(`docker-registry did not listen on ${port}: ${output()}`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

export async function startRegistry(options: RegistryOptions = {}): Promise<Registry> {
  const binary = registryBinary();
  if (!binary) throw new Error(NO_REGISTRY);
  const dir = tempDir("oats-registry-");
  const root = join(dir, "storage");
  mkdirSync(root);
  const tokenRequests: Registry["tokenRequests"] = [];
  let tokenServer: Awaited<ReturnType<typeof startTokenServer>> | null = null;
  const extra: string[] = [];
  if (options.auth === "htpasswd") {
    writeFileSync(join(dir, "htpasswd"), htpasswdLine());
    extra.push("auth:", "  htpasswd:", "    realm: oats-test", `    path: ${join(dir, "htpasswd")}`);
  } else if (options.auth === "token") {
    tokenServer = await startTokenServer(dir, tokenRequests);
    extra.push(
      "auth:",
      "  token:",
      `    realm: http://127.0.0.1:${tokenServer.port}/token`,
      "    service: oats-test-registry",
      "    issuer: oats-test-issuer",
      `    rootcertbundle: ${tokenServer.cert}`,
    );
  }
  let certificate: string | null = null;
  for (let tries = 0; ; tries++) {
    const port = await freePort();
    const tls: string[] = [];
    if (options.tls) {
      const pair = selfSigned(dir, "registry", "IP:127.0.0.1");
      certificate = pair.cert;
      tls.push("  tls:", `    certificate: ${pair.cert}`, `    key: ${pair.key}`);
    }
    const config = [
      "version: 0.1",
      "log:",
      "  level: error",
      "  accesslog:",
      "    disabled: true",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${root}`,
      "  delete:",
      "    enabled: true",
      "http:",
      `  addr: 127.0.0.1:${port}`,
      ...tls,
      ...extra,
      "",
    ].join("\n");
    const configPath = join(dir, "config.yml");
    writeFileSync(configPath, config);
    const child = spawn(binary, ["serve", configPath], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout!.on("data", (chunk: Buffer) => (output = (output + chunk.toString()).slice(-8192)));
    child.stderr!.on("data", (chunk: Buffer) => (output = (output + chunk.toString()).slice(-8192)));
    try {
      await waitReady(port, child, () => output);
    } catch (error) {
      child.kill("SIGKILL");
      // Another process may have taken the port between our probe and the registry's bind.
      if (tries < 2) continue;
      await tokenServer?.close();
      throw error;
    }
    const host = `127.0.0.1:${port}`;
    return {
      host,
      port,
      root,
      certificate,
      tokenRequests,
      ref: (repository, suffix = "") => `${options.tls ? "oci" : "http"}://${host}/${repository}${suffix}`,
      blobPath: (digest) => {
        const hex = digest.replace(/^sha256:/, "");
        return join(root, "docker/registry/v2/blobs/sha256", hex.slice(0, 2), hex, "data");
      },
      stop: async () => {
        if (child.exitCode === null) {
          const exited = new Promise((resolve) => child.once("exit", resolve));
          child.kill("SIGTERM");
          const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
          await exited;
          clearTimeout(timer);
        }
        await tokenServer?.close();
      },
    };
  }
}

export function sha256(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}
