/**
 * The CLI driver: the suite through `node dist/cli/bin.js` as real child
 * processes (`npm run build` first, as `npm test` does). Every step is a
 * command with `--json`: capture prepare, approve, revoke, queue add,
 * dispatch --exec, run ls|show|verify|cancel, push --to.
 *
 * The tests run as root, and a capture not approved as privileged is refused
 * as root (property 6), so this driver is an ordinary operator for real: every
 * command runs as `nobody` (uid/gid 65534) in a scope nobody owns, with its own
 * chain-log state directory. `dispatch(..., {uid0: true})` enters uid 0 for
 * real: the scope is handed to root (chown -R -h 0:0, as an operator moving
 * the store to root would; a store refuses run directories owned by another
 * account), and that dispatch and every later command in the scope run as
 * root.
 *
 * The dispatcher is the `oats dispatch --exec` process: SIGINT and SIGTERM
 * are sent to it, for real. The run's log path is found by the driver from
 * the run directories (`.agents/runs/<handle>/`, docs/design/evidence.md)
 * while the dispatch is in flight; the suite watches the file itself.
 */
import { spawn, spawnSync } from "node:child_process";
import { chownSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { readDeliveredRun } from "./library.js";
import { REPO, type Envelope } from "../../helpers.js";
import {
  DriverRefusal,
  PROPERTY_NAMES,
  type CancelVia,
  type CaptureRequest,
  type DispatchOutcome,
  type Driver,
  type DriverScope,
  type FarSide,
  type QueuedCapture,
  type RunningDispatch,
  type RunView,
  type Spoil,
  type Transport,
} from "../driver.js";
import { writeCaptureFiles } from "./capture-files.js";
import { runViewOf, tamperRetained, withAuditUnavailable, type ReadRunFields } from "./scope-ops.js";

const BIN = join(REPO, "dist/cli/bin.js");
/** The ordinary operator's principal, as dispatch computes it. */
const PRINCIPAL = `nobody@${hostname()}`;
const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

interface Ran {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  envelope: Envelope | null;
}

export const NOBODY = { uid: 65534, gid: 65534 } as const;

/** Who runs a command: the ordinary operator (nobody, with its own state directory) or root. */
interface As {
  readonly root: boolean;
  readonly state: string;
}

/** One `oats --json --scope <scope> ...` child, asynchronously (so runs may overlap). */
function oats(
  scope: string,
  args: string[],
  as: As,
  env: Record<string, string> = {},
): { child: ReturnType<typeof spawn>; done: Promise<Ran> } {
  const who = as.root ? {} : { ...NOBODY };
  const child = spawn(process.execPath, [BIN, "--json", "--scope", scope, ...args], {
    cwd: "/",
    env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", OATS_STATE_DIR: as.state, HOME: as.state, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    ...who,
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const done = new Promise<Ran>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (status, signal) => {
      let envelope: Envelope | null = null;
      try {
        envelope = JSON.parse(stdout) as Envelope;
      } catch {
        envelope = null;
      }
      resolve({ status, signal, stdout, stderr, envelope });
    });
  });
  return { child, done };
}

/** A command that must succeed; a refusal envelope is the driver's typed refusal. */
async function ok(
  scope: string,
  args: string[],
  as: As,
  env: Record<string, string> = {},
): Promise<Record<string, any>> {
  const ran = await oats(scope, args, as, env).done;
  if (ran.envelope?.ok === false && ran.envelope.error !== undefined)
    throw new DriverRefusal(ran.envelope.error.code, ran.envelope.error.message);
  if (ran.envelope === null || !ran.envelope.ok)
    throw new Error(`oats ${args.join(" ")} failed (status ${ran.status}): ${ran.stdout}${ran.stderr}`);
  return ran.envelope.result ?? {};
}

function subjectArgs(subject: { kind: string; key: string; integrity: string }): string[] {
  return [subject.kind, subject.key, subject.integrity];
}

class CliScope implements DriverScope {
  private readonly prepared = new Map<string, { result: Record<string, any>; entry: string }>();
  private readonly homes: string;
  private operator: As;
  private readonly root: As = { root: true, state: process.env["OATS_STATE_DIR"] ?? tmpdir() };

  constructor(readonly dir: string) {
    chownSync(dir, NOBODY.uid, NOBODY.gid);
    this.homes = `${dir}.homes`;
    mkdirSync(this.homes, { mode: 0o755 });
    const state = `${dir}.state`;
    mkdirSync(state, { mode: 0o700 });
    chownSync(state, NOBODY.uid, NOBODY.gid);
    this.operator = { root: false, state };
  }

  async queue(request: CaptureRequest): Promise<QueuedCapture> {
    const files = writeCaptureFiles(join(this.homes, request.name), request, { principal: PRINCIPAL });
    const result = await ok(this.dir, ["capture", "prepare", files.spec], this.operator);
    if (request.approve !== false)
      await ok(
        this.dir,
        ["approve", ...subjectArgs(result["composition"]["subject"]), "--reason", "conformance suite"],
        this.operator,
      );
    await ok(this.dir, ["queue", "add", result["id"], "--job", request.name], this.operator);
    this.prepared.set(request.name, { result, entry: files.entry });
    return { name: request.name, job: request.name, request };
  }

  async spoil(capture: QueuedCapture, how: Spoil): Promise<QueuedCapture> {
    const known = this.prepared.get(capture.name);
    if (known === undefined) throw new Error(`capture ${capture.name} was not queued by this scope`);
    if (how === "revoke") {
      await ok(
        this.dir,
        ["revoke", ...subjectArgs(known.result["composition"]["subject"]), "--reason", "conformance suite: revoked"],
        this.operator,
      );
      return capture;
    }
    if (how === "tamper") {
      tamperRetained(join(known.result["retained"]["dir"], known.entry));
      return capture;
    }
    const files = writeCaptureFiles(join(this.homes, `${capture.name}.mismatch`), capture.request, {
      principal: PRINCIPAL,
      envExtra: { CONFORMANCE_CHANGED: "1" },
    });
    const result = await ok(this.dir, ["capture", "prepare", files.spec], this.operator);
    const job = `${capture.name}-changed`;
    await ok(this.dir, ["queue", "add", result["id"], "--job", job], this.operator);
    return { ...capture, job };
  }

  withAuditUnavailable<T>(body: () => Promise<T>): Promise<T> {
    return withAuditUnavailable(this.dir, body);
  }

  /** The handles whose control.json names `job` (the run directories as the store lays them out). */
  private handlesOf(job: string): string[] {
    const root = join(this.dir, ".agents", "runs");
    let names: string[];
    try {
      names = readdirSync(root);
    } catch {
      return [];
    }
    return names.filter((name) => {
      try {
        const control = JSON.parse(readFileSync(join(root, name, "control.json"), "utf8")) as {
          base?: { job?: string };
        };
        return control.base?.job === job;
      } catch {
        try {
          return (JSON.parse(readFileSync(join(root, name, "record.json"), "utf8")) as { job?: string }).job === job;
        } catch {
          return false;
        }
      }
    });
  }

  /** From now on the scope is root's, and every command runs as root. */
  private enterRoot(): void {
    if (this.operator.root) return;
    const chowned = spawnSync("chown", ["-R", "-h", "0:0", this.dir], { encoding: "utf8" });
    if (chowned.status !== 0) throw new Error(`chown -R 0:0 ${this.dir}: ${chowned.stderr}`);
    this.operator = this.root;
  }

  dispatch(capture: QueuedCapture, options: { uid0?: boolean } = {}): RunningDispatch {
    if (options.uid0 === true) this.enterRoot();
    const before = new Set(this.handlesOf(capture.job));
    const { child, done: ran } = oats(this.dir, ["dispatch", capture.job, "--exec"], this.operator, {
      ...capture.request.credentials,
    });
    let ended = false;
    const done = ran.then((run): DispatchOutcome => {
      ended = true;
      const envelope = run.envelope;
      if (envelope === null)
        throw new Error(
          `dispatch printed no envelope (status ${run.status}, signal ${run.signal}): ${run.stdout}${run.stderr}`,
        );
      if (!envelope.ok) {
        if (
          envelope.result === undefined &&
          envelope.error !== undefined &&
          envelope.error.details?.["runId"] === undefined
        )
          return { kind: "refused", code: envelope.error.code, message: envelope.error.message };
      }
      const result = (envelope.result ?? envelope.error?.details ?? {}) as Record<string, any>;
      return {
        kind: "ran",
        runId: result["runId"],
        handle: result["handle"],
        exit: result["exit"],
        exitCode: run.status ?? -1,
        result: result["result"],
      };
    });
    const handle = async (): Promise<string> => {
      for (;;) {
        const mine = this.handlesOf(capture.job).find((name) => !before.has(name));
        if (mine !== undefined) return mine;
        if (ended) throw new Error(`the dispatch of ${capture.job} ended without a run: ${JSON.stringify(await done)}`);
        await sleep(25);
      }
    };
    return {
      done,
      logPath: async () => join(this.dir, ".agents", "runs", await handle(), "log"),
      cancel: async (via: CancelVia) => {
        if (via === "command") await ok(this.dir, ["run", "cancel", await handle()], this.operator);
        else child.kill(via);
      },
    };
  }

  async listRuns() {
    const result = await ok(this.dir, ["run", "ls"], this.operator);
    return ((result["runs"] ?? []) as Array<Record<string, any>>).map((run) => ({
      handle: run["handle"],
      runId: run["runId"] ?? null,
      result: run["result"] ?? null,
    }));
  }

  async readRun(ref: string): Promise<RunView> {
    return runViewOf((await ok(this.dir, ["run", "show", ref], this.operator)) as ReadRunFields);
  }

  async verifyRun(ref: string) {
    const ran = await oats(this.dir, ["run", "verify", ref], this.operator).done;
    return { ok: ran.status === 0 && ran.envelope?.ok === true, detail: ran.stdout + ran.stderr };
  }

  async push(far: FarSide) {
    // The share is the operator's to write.
    if (far.to.startsWith("dir:") && !this.operator.root)
      chownSync(far.to.slice("dir:".length), NOBODY.uid, NOBODY.gid);
    const result = await ok(this.dir, ["push", "--to", far.to], this.operator);
    return { delivered: ((result["delivered"] ?? []) as Array<{ runId: string }>).map((entry) => entry.runId) };
  }

  /** No command reads the far side back; the library's reader does, from the far side only. */
  readDelivered(far: FarSide, runId: string) {
    return readDeliveredRun(far, runId);
  }
}

export function cliDriver(transport: Transport): Driver {
  return {
    name: "cli",
    transport,
    skips:
      process.getuid?.() === 0
        ? {}
        : Object.fromEntries(
            PROPERTY_NAMES.map((name) => [
              name,
              "the CLI driver runs its operator as nobody and needs root to become it",
            ]),
          ),
    uid0:
      "entered for real: the scope is handed to root (chown -R) and the " +
      "dispatch, and every later command in that scope, runs as root",
    dispatcher: "the `oats dispatch --exec` child process (a real kill)",
    // Each step starts a Node process: two properties at a time keep a small machine responsive enough for the
    // timing checks.
    parallel: 2,
    async scope(dir: string) {
      return new CliScope(dir);
    },
  };
}
