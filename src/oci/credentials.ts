import { closeSync, constants, fstatSync, openSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";

/**
 * Where registry credentials come from, in order: OATS_REGISTRY_USER and
 * OATS_REGISTRY_PASSWORD; then the first of Podman's auth file
 * ($REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json) and Docker's
 * config ($DOCKER_CONFIG/config.json, ~/.docker/config.json) that exists:
 * its `credHelpers` entry for the host, an `auths` entry, or its
 * `credsStore`. A helper is spawned as `docker-credential-<name> get`
 * without a shell. No message built here ever holds a secret.
 */

export interface Credentials {
  readonly username: string;
  readonly password: string;
  /** Where they came from, for messages: never the values. */
  readonly source: string;
}

export interface CredentialOptions {
  readonly env?: NodeJS.ProcessEnv;
  readonly home?: string;
  /** Milliseconds a credential helper may take. */
  readonly helperTimeoutMs?: number;
}

const HELPER_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$/;
const MAX_CONFIG = 1 << 20;

function invalid(message: string, details: Record<string, unknown>): OatsError {
  return new OatsError("invalid-input", message, details);
}

/** `https://host/v1/`, `host`, `host:port` -> `host[:port]` lowercased. */
export function normalizeAuthKey(key: string): string {
  return key
    .replace(/^[a-z]+:\/\//i, "")
    .replace(/\/.*$/, "")
    .toLowerCase();
}

interface AuthConfig {
  readonly auths?: Record<string, { auth?: unknown; username?: unknown; password?: unknown }>;
  readonly credHelpers?: Record<string, unknown>;
  readonly credsStore?: unknown;
}

function configPaths(env: NodeJS.ProcessEnv, home: string): string[] {
  const paths: string[] = [];
  if (env["REGISTRY_AUTH_FILE"]) paths.push(env["REGISTRY_AUTH_FILE"]);
  if (env["XDG_RUNTIME_DIR"]) paths.push(join(env["XDG_RUNTIME_DIR"], "containers/auth.json"));
  paths.push(join(env["DOCKER_CONFIG"] || join(home, ".docker"), "config.json"));
  return paths;
}

/**
 * The auth file's bytes, read through one descriptor opened with O_NONBLOCK
 * and checked to be a regular file on it (fstat): a FIFO at its name never
 * blocks the command, a device is never read. A symlink at the name is
 * followed, unlike every other file oats reads: the file is the operator's
 * own credential configuration (often a link into a dotfiles checkout), and
 * whoever can place a name there can as well place a file of their choosing.
 */
function readConfigBytes(path: string): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) throw invalid(`the registry auth file ${path} is not a regular file`, { path });
    if (stats.size > MAX_CONFIG)
      throw invalid(`the registry auth file ${path} is larger than ${MAX_CONFIG} bytes`, { path });
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

function readConfig(path: string): AuthConfig | null {
  let text: string;
  try {
    const bytes = readConfigBytes(path);
    if (bytes.length > MAX_CONFIG)
      throw invalid(`the registry auth file ${path} is larger than ${MAX_CONFIG} bytes`, { path });
    text = bytes.toString("utf8");
  } catch (error) {
    if (error instanceof OatsError) throw error;
    const code = errnoCode(error);
    if (code === "ENOENT" || code === "ENOTDIR") return null;
    throw invalid(`the registry auth file ${path} cannot be read (${code ?? "error"})`, { path, errno: code });
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Never quote the file: it holds secrets.
    throw invalid(`the registry auth file ${path} is not JSON`, { path });
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
    throw invalid(`the registry auth file ${path} is not a JSON object`, { path });
  return parsed as AuthConfig;
}

function own<T>(record: Record<string, T> | undefined, key: string): T | undefined {
  if (!record || typeof record !== "object") return undefined;
  for (const [name, value] of Object.entries(record)) if (normalizeAuthKey(name) === key) return value;
  return undefined;
}

function fromAuthsEntry(
  entry: { auth?: unknown; username?: unknown; password?: unknown },
  path: string,
  host: string,
): Credentials {
  const source = `${path} auths[${host}]`;
  if (typeof entry.auth === "string" && entry.auth !== "") {
    const decoded = Buffer.from(entry.auth, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon <= 0)
      throw invalid(`the auths entry for ${host} in ${path} is not base64 of user:password`, { path, host });
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1), source };
  }
  if (typeof entry.username === "string" && typeof entry.password === "string")
    return { username: entry.username, password: entry.password, source };
  throw invalid(`the auths entry for ${host} in ${path} has no auth field`, { path, host });
}

/** Run `docker-credential-<name> get` with the host on stdin; never through a shell, never echoing its output. */
export function runCredentialHelper(
  name: string,
  host: string,
  options: CredentialOptions = {},
): Promise<Credentials | null> {
  if (!HELPER_NAME.test(name))
    return Promise.reject(
      invalid(`credential helper name ${JSON.stringify(name)} is not a plain name`, { helper: name }),
    );
  const program = `docker-credential-${name}`;
  return new Promise((resolve, reject) => {
    // Loaded when a helper runs, not with the module: most commands that load this layer never spawn.
    const child = process.getBuiltinModule("node:child_process").spawn(program, ["get"], {
      shell: false,
      stdio: ["pipe", "pipe", "ignore"],
      env: options.env ?? process.env,
      timeout: options.helperTimeoutMs ?? 30_000,
    });
    const out: Buffer[] = [];
    let size = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= 65536) out.push(chunk);
    });
    child.on("error", (error) =>
      reject(
        invalid(`credential helper ${program} cannot be run (${errnoCode(error) ?? "error"})`, {
          helper: program,
          errno: errnoCode(error),
        }),
      ),
    );
    child.stdin.on("error", () => undefined);
    child.stdin.end(host);
    child.on("close", (code, signal) => {
      const text = Buffer.concat(out).toString("utf8");
      // docker-credential-helpers answer "credentials not found in native keychain" with exit 1.
      if (code !== 0) {
        if (/not found/i.test(text)) return resolve(null);
        return reject(
          invalid(`credential helper ${program} failed (${signal ?? `exit ${code}`})`, {
            helper: program,
            exit: code,
            signal,
          }),
        );
      }
      try {
        const parsed = JSON.parse(text) as { Username?: unknown; Secret?: unknown };
        if (typeof parsed.Username !== "string" || typeof parsed.Secret !== "string") throw new Error("shape");
        resolve({ username: parsed.Username, password: parsed.Secret, source: `credential helper ${program}` });
      } catch {
        reject(
          invalid(`credential helper ${program} answered something other than {Username, Secret}`, { helper: program }),
        );
      }
    });
  });
}

/** The credentials for `host` (`host[:port]`), or null for anonymous access. */
export async function resolveCredentials(host: string, options: CredentialOptions = {}): Promise<Credentials | null> {
  const env = options.env ?? process.env;
  const user = env["OATS_REGISTRY_USER"];
  const password = env["OATS_REGISTRY_PASSWORD"];
  if (user || password) {
    if (!user || !password)
      throw invalid("OATS_REGISTRY_USER and OATS_REGISTRY_PASSWORD must be set together", {
        missing: user ? "OATS_REGISTRY_PASSWORD" : "OATS_REGISTRY_USER",
      });
    return { username: user, password, source: "OATS_REGISTRY_USER/OATS_REGISTRY_PASSWORD" };
  }
  const key = normalizeAuthKey(host);
  for (const path of configPaths(env, options.home ?? homedir())) {
    const config = readConfig(path);
    if (config === null) continue;
    const helper = own(config.credHelpers as Record<string, unknown> | undefined, key);
    if (typeof helper === "string") return runCredentialHelper(helper, key, options);
    const entry = own(config.auths, key);
    if (entry && typeof entry === "object") return fromAuthsEntry(entry, path, key);
    if (typeof config.credsStore === "string" && config.credsStore !== "")
      return runCredentialHelper(config.credsStore, key, options);
  }
  return null;
}
