/**
 * The library driver: the suite through the API exported from src/index.ts,
 * in this process. Preparing goes through prepareCapture, approve and
 * addJob; dispatch through planQueuedRun and the evidence run; the
 * far side through pushEvidence and readDelivered.
 *
 * The dispatcher is this process: SIGINT/SIGTERM "to the dispatcher" are
 * the library's equivalent, an abort of the run's AbortSignal (the CLI
 * wires its signal handlers to exactly that; the CLI driver sends real
 * signals).
 */
import { join } from "node:path";
import { Writable } from "node:stream";
import {
  addJob,
  approve,
  cancelRun,
  isOatsError,
  listRuns,
  prepareCapture,
  pushEvidence,
  readDelivered,
  readRun,
  planQueuedRun,
  revoke,
  runDispatchPlanWithEvidence,
  verifyRun,
  type PrepareCaptureResult,
} from "../../../src/index.js";
import {
  DriverRefusal,
  PROPERTY_NAMES,
  type CancelVia,
  type CaptureRequest,
  type DeliveredRun,
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
import { runViewOf, tamperRetained, withAuditUnavailable } from "./scope-ops.js";

/** Where the run's echo goes: nowhere (the suite reads the log, not the terminal). */
function sink(): Writable {
  return new Writable({
    write(_chunk: Buffer, _encoding, done) {
      done();
    },
  });
}

/** An OatsError on the way to a queued capture is the driver's typed refusal. */
async function refusals<T>(body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (error) {
    if (isOatsError(error)) throw new DriverRefusal(error.code, error.message);
    throw error;
  }
}

/** The effective uid the library is told the dispatcher has when the suite does not ask for uid 0. */
export const ORDINARY_EUID = 65534;

const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

export class LibraryScope implements DriverScope {
  private readonly prepared = new Map<
    string,
    { prepared: PrepareCaptureResult; files: ReturnType<typeof writeCaptureFiles> }
  >();
  constructor(readonly dir: string) {}

  async queue(request: CaptureRequest): Promise<QueuedCapture> {
    return refusals(async () => {
      const files = writeCaptureFiles(join(this.dir, "..", `${request.name}.home`), request);
      const prepared = await prepareCapture(this.dir, files.spec);
      if (request.approve !== false)
        await approve(this.dir, prepared.composition.subject, { reason: "conformance suite" });
      await addJob(this.dir, { job: request.name, resolution: prepared.id });
      this.prepared.set(request.name, { prepared, files });
      return { name: request.name, job: request.name, request };
    });
  }

  async spoil(capture: QueuedCapture, how: Spoil): Promise<QueuedCapture> {
    const known = this.prepared.get(capture.name);
    if (known === undefined) throw new Error(`capture ${capture.name} was not queued by this scope`);
    if (how === "revoke") {
      await revoke(this.dir, known.prepared.composition.subject, { reason: "conformance suite: revoked" });
      return capture;
    }
    if (how === "tamper") {
      tamperRetained(join(known.prepared.retained.dir, known.files.entry));
      return capture;
    }
    // mismatch: the same capture re-prepared with another pinned env value, queued as a new job.
    const files = writeCaptureFiles(join(this.dir, "..", `${capture.name}.mismatch`), capture.request, {
      envExtra: { CONFORMANCE_CHANGED: "1" },
    });
    const prepared = await prepareCapture(this.dir, files.spec);
    const job = `${capture.name}-changed`;
    await addJob(this.dir, { job, resolution: prepared.id });
    return { ...capture, job };
  }

  withAuditUnavailable<T>(body: () => Promise<T>): Promise<T> {
    return withAuditUnavailable(this.dir, body);
  }

  dispatch(capture: QueuedCapture, options: { uid0?: boolean } = {}): RunningDispatch {
    const abort = new AbortController();
    const euid = options.uid0 === true ? 0 : ORDINARY_EUID;
    const before = new Set(listRuns(this.dir).map((run) => run.handle));
    let ended = false;
    const done = (async (): Promise<DispatchOutcome> => {
      try {
        let plan;
        try {
          plan = await planQueuedRun(this.dir, capture.job, { env: { ...capture.request.credentials }, euid });
        } catch (error) {
          if (isOatsError(error)) return { kind: "refused", code: error.code, message: error.message };
          throw error;
        }
        try {
          const run = await runDispatchPlanWithEvidence(this.dir, plan, {
            output: { stdout: sink(), stderr: sink() },
            signal: abort.signal,
            euid,
          });
          return {
            kind: "ran",
            runId: run.runId,
            handle: run.handle,
            exit: { code: run.exit.code, signal: run.exit.signal },
            exitCode: run.exitCode,
            result: run.result,
          };
        } catch (error) {
          if (isOatsError(error)) return { kind: "refused", code: error.code, message: error.message };
          throw error;
        }
      } finally {
        ended = true;
      }
    })();
    const handle = async (): Promise<string> => {
      for (;;) {
        const mine = listRuns(this.dir).find((run) => !before.has(run.handle) && run.job === capture.job);
        if (mine !== undefined) return mine.handle;
        if (ended) throw new Error(`the dispatch of ${capture.job} ended without a run: ${JSON.stringify(await done)}`);
        await sleep(20);
      }
    };
    return {
      done,
      logPath: async () => join(this.dir, ".agents", "runs", await handle(), "log"),
      cancel: async (via: CancelVia) => {
        if (via === "command") await cancelRun(this.dir, await handle());
        else abort.abort(new Error(`${via} to the dispatcher`));
      },
    };
  }

  async listRuns() {
    return listRuns(this.dir).map((run) => ({ handle: run.handle, runId: run.runId, result: run.result }));
  }

  async readRun(ref: string): Promise<RunView> {
    return runViewOf(readRun(this.dir, ref));
  }

  async verifyRun(ref: string) {
    try {
      const verdict = verifyRun(this.dir, ref);
      return { ok: verdict.status === "complete", detail: `${verdict.result} ${verdict.status}` };
    } catch (error) {
      return { ok: false, detail: (error as Error).message };
    }
  }

  async push(far: FarSide) {
    const result = await pushEvidence(this.dir, { to: far.to });
    return { delivered: result.delivered.map((entry) => entry.runId) };
  }

  readDelivered(far: FarSide, runId: string) {
    return readDeliveredRun(far, runId);
  }
}

/** A run as the far side holds it, through the transport's reader (never the scope). */
export async function readDeliveredRun(far: FarSide, runId: string): Promise<DeliveredRun | null> {
  const files = await readDelivered(far.to, runId);
  if (files === null) return null;
  const recordBytes = files.get("record.json");
  const log = files.get("log");
  if (recordBytes === undefined || log === undefined) return null;
  return { recordBytes, log };
}

export function libraryDriver(transport: Transport): Driver {
  return {
    name: "library",
    transport,
    skips: {},
    uid0:
      `simulated: planQueuedRun and runDispatchPlanWithEvidence are told the ` +
      `dispatcher's effective uid (their euid option: 0 for uid 0, ` +
      `${ORDINARY_EUID} otherwise); the child runs as this process (uid ` +
      `${process.getuid?.()})`,
    parallel: PROPERTY_NAMES.length,
    dispatcher: "this process; SIGINT/SIGTERM are the library's equivalent, an abort of the run's AbortSignal",
    async scope(dir: string) {
      return new LibraryScope(dir);
    },
  };
}
