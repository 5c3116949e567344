/**
 * What the library and CLI drivers do to a scope in the same way: change a
 * retained file as a writer outside oats would (a tampered capture), make the
 * audit log refuse writes (audit unavailable), and turn a read run (the
 * library's readRun, or `oats run show --json`'s result, which has the same
 * fields) into the suite's RunView.
 */
import { chmodSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeUnwritable } from "../../support/unwritable.js";
import type { ExitStatus, RunResult, RunView } from "../driver.js";

/** Append a line to a file inside a retained (read-only) revision directory, restoring the modes after. */
export function tamperRetained(path: string): void {
  const dir = join(path, "..");
  const dirMode = statSync(dir).mode & 0o7777;
  const mode = statSync(path).mode & 0o7777;
  chmodSync(dir, dirMode | 0o200);
  chmodSync(path, mode | 0o200);
  writeFileSync(path, `${readFileSync(path, "utf8")}\necho tampered\n`);
  chmodSync(path, mode);
  chmodSync(dir, dirMode);
}

/** Run `body` while the scope's audit log really refuses writes (test/support/unwritable.ts), then restore it. */
export async function withAuditUnavailable<T>(scope: string, body: () => Promise<T>): Promise<T> {
  const auditDir = join(scope, ".agents", "audit");
  const { probe, restore } = makeUnwritable(auditDir, join(auditDir, "audit.jsonl"));
  try {
    let refused = false;
    try {
      probe();
    } catch {
      refused = true;
    }
    if (!refused) throw new Error(`the audit directory ${auditDir} still accepts writes`);
    return await body();
  } finally {
    restore();
  }
}

export interface ReadRunFields {
  readonly handle: string;
  readonly dir: string;
  readonly runId: string | null;
  readonly record: unknown;
  readonly lines: ReadonlyArray<{ at: string; stream: "out" | "err"; text: string }>;
  readonly footer: readonly string[];
}

export function runViewOf(run: ReadRunFields): RunView {
  const record = run.record as (Record<string, any> & { exit: ExitStatus; result: RunResult }) | null;
  return {
    handle: run.handle,
    runId: run.runId,
    lines: run.lines.map((line) => ({ at: line.at, stream: line.stream, text: line.text })),
    footer: run.footer.map((line) => line.replace(/^# /, "")),
    exit: record === null ? null : { code: record.exit.code, signal: record.exit.signal },
    result: record === null ? null : record.result,
    record,
    logPath: join(run.dir, "log"),
  };
}
