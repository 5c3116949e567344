/**
 * The mutant driver: the library driver with exactly one defect, the kind
 * that makes captured output fail invisibly. The suite runs every
 * property against each single-defect mutant and requires at least one to
 * fail: a defect no property catches is a hole in the suite.
 *
 * Each defect is what an implementation with that bug would report:
 * - stamp-at-flush: every line of a run carries one stamp (the flush's);
 * - exit-zero: the child's exit is reported as code 0 (and so OK);
 * - drop-final-line: the last captured line is lost;
 * - noop-delivery: push says it delivered every run and sends nothing;
 * - keep-ansi: the log keeps the terminal's escape sequences (the raw
 *   output of a Node child, which a prelude copies to a file beside the
 *   scope as it writes it, carriage returns still resolved; an sh child's
 *   lines are left as they are);
 * - unmasked-credentials: credential values are written where the mask is;
 * - no-group-kill: cancel kills the child it started, not its process
 *   group, so a grandchild lives on (the driver records the child's pid
 *   from inside the script to find it).
 */
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type {
  CaptureRequest,
  DispatchOutcome,
  Driver,
  DriverScope,
  LogLine,
  QueuedCapture,
  RunningDispatch,
  RunView,
} from "../driver.js";
import type { LibraryScope } from "./library.js";

export const DEFECTS = [
  "stamp-at-flush",
  "exit-zero",
  "drop-final-line",
  "noop-delivery",
  "keep-ansi",
  "unmasked-credentials",
  "no-group-kill",
] as const;
export type Defect = (typeof DEFECTS)[number];

/** The text after the last carriage return (a trailing one, of `\r\n`, dropped first). */
function lastCarriage(text: string): string {
  const line = text.endsWith("\r") ? text.slice(0, -1) : text;
  return line.slice(line.lastIndexOf("\r") + 1);
}

/** The raw output's lines of one stream (a final line without newline kept). */
function rawLines(raw: string): string[] {
  if (raw === "") return [];
  const parts = raw.split("\n");
  if (parts[parts.length - 1] === "") parts.pop();
  return parts.map(lastCarriage);
}

class MutantScope implements DriverScope {
  private readonly requests = new Map<string, CaptureRequest>();
  private readonly pidFiles = new Map<string, string>();
  /** Beside the scope, so the suite's cleanup takes it too. */
  private readonly pidDir: string;

  constructor(
    private readonly base: LibraryScope,
    private readonly defect: Defect,
  ) {
    this.pidDir = `${base.dir}.pids`;
    mkdirSync(this.pidDir);
  }

  get dir(): string {
    return this.base.dir;
  }

  async queue(request: CaptureRequest): Promise<QueuedCapture> {
    let changed = request;
    if (this.defect === "keep-ansi" && request.script.lang === "node") {
      // The child's raw writes, copied to files beside the scope (the echo is masked text, never the raw bytes).
      const base = JSON.stringify(join(this.pidDir, request.name));
      const prelude =
        `import { appendFileSync as __conformanceAppend } from "node:fs";\n` +
        `for (const [__name, __stream] of [["stdout", process.stdout], ["stderr", process.stderr]]) {\n` +
        `  const __write = __stream.write.bind(__stream);\n` +
        `  __stream.write = (chunk, ...rest) => {\n` +
        `    __conformanceAppend(${base} + "." + __name, chunk);\n` +
        `    return __write(chunk, ...rest);\n  };\n}\n`;
      changed = { ...request, script: { ...request.script, body: `${prelude}${request.script.body}` } };
    }
    if (this.defect === "no-group-kill") {
      // The child says who it is, so the defective cancel can kill just it.
      const pidFile = join(this.pidDir, `${request.name}.pid`);
      this.pidFiles.set(request.name, pidFile);
      const quoted = `'${pidFile.replace(/'/g, `'\\''`)}'`;
      const prelude =
        request.script.lang === "sh"
          ? `echo $$ > ${quoted}\n`
          : `import { writeFileSync as __conformanceWrite } from ` +
            `"node:fs";\n__conformanceWrite(${JSON.stringify(pidFile)}, ` +
            `String(process.pid));\n`;
      changed = { ...request, script: { ...request.script, body: `${prelude}${request.script.body}` } };
    }
    const capture = await this.base.queue(changed);
    return { ...capture, request };
  }

  spoil(capture: QueuedCapture, how: Parameters<DriverScope["spoil"]>[1]): Promise<QueuedCapture> {
    return this.base.spoil(capture, how);
  }

  withAuditUnavailable<T>(body: () => Promise<T>): Promise<T> {
    return this.base.withAuditUnavailable(body);
  }

  dispatch(capture: QueuedCapture, options?: { uid0?: boolean }): RunningDispatch {
    const running = this.base.dispatch(capture, options);
    const done = running.done.then((outcome): DispatchOutcome => {
      if (outcome.kind !== "ran") return outcome;
      this.requests.set(outcome.runId, capture.request);
      if (this.defect === "exit-zero")
        return {
          ...outcome,
          exit: { code: 0, signal: null },
          exitCode: 0,
          result: outcome.result === "FAILED" ? "OK" : outcome.result,
        };
      return outcome;
    });
    return {
      done,
      logPath: () => running.logPath(),
      cancel: async (via) => {
        if (this.defect !== "no-group-kill") return running.cancel(via);
        const pid = Number(readFileSync(this.pidFiles.get(capture.name)!, "utf8").trim());
        process.kill(pid, "SIGKILL");
      },
    };
  }

  listRuns() {
    return this.base.listRuns();
  }

  async readRun(ref: string): Promise<RunView> {
    const run = await this.base.readRun(ref);
    const request = run.runId === null ? undefined : this.requests.get(run.runId);
    switch (this.defect) {
      case "stamp-at-flush": {
        const flush = run.lines[run.lines.length - 1]?.at;
        return { ...run, lines: run.lines.map((line) => ({ ...line, at: flush! })) };
      }
      case "exit-zero": {
        const result = run.result === "FAILED" ? "OK" : run.result;
        const footer = run.footer.map((line) =>
          line.startsWith("exit: ") ? "exit: code 0" : line.startsWith("RESULT: ") ? `RESULT: ${result}` : line,
        );
        const record = run.record === null ? null : { ...run.record, exit: { code: 0, signal: null }, result };
        return { ...run, exit: { code: 0, signal: null }, result, footer, record };
      }
      case "drop-final-line":
        return { ...run, lines: run.lines.slice(0, -1) };
      case "keep-ansi": {
        if (request === undefined || request.script.lang !== "node") return run;
        const written = (name: string) => {
          const path = join(this.pidDir, `${request.name}.${name}`);
          return existsSync(path) ? readFileSync(path, "utf8") : "";
        };
        const streams = { out: rawLines(written("stdout")), err: rawLines(written("stderr")) };
        const seen = { out: 0, err: 0 };
        const lines: LogLine[] = run.lines.map((line) => ({
          ...line,
          text: streams[line.stream][seen[line.stream]++] ?? line.text,
        }));
        return { ...run, lines };
      }
      case "unmasked-credentials": {
        const credentials = request?.credentials ?? {};
        const unmask = (text: string) =>
          text.replace(
            /\[REDACTED:credential:([A-Za-z_][A-Za-z0-9_]*)\]/g,
            (mask, name: string) => credentials[name] ?? mask,
          );
        return { ...run, lines: run.lines.map((line) => ({ ...line, text: unmask(line.text) })) };
      }
      default:
        return run;
    }
  }

  verifyRun(ref: string) {
    return this.base.verifyRun(ref);
  }

  async push(far: Parameters<DriverScope["push"]>[0]) {
    if (this.defect !== "noop-delivery") return this.base.push(far);
    const runs = await this.base.listRuns();
    return { delivered: runs.flatMap((run) => (run.runId === null ? [] : [run.runId])) };
  }

  readDelivered(far: Parameters<DriverScope["readDelivered"]>[0], runId: string) {
    return this.base.readDelivered(far, runId);
  }
}

/** `base` must be the library driver: the mutant needs the raw output its scopes keep. */
export function mutantDriver(base: Driver, defect: Defect): Driver {
  return {
    ...base,
    name: `mutant(${defect})`,
    async scope(dir: string) {
      return new MutantScope((await base.scope(dir)) as LibraryScope, defect);
    },
  };
}
