/**
 * Long-lived child processes for races of many rounds: each child loads
 * once, says "ready" on stderr, then takes one JSON request a line on stdin
 * and answers each with one JSON line on stdout. A round writes its
 * requests to every worker in the same tick, so they start together
 * without paying a process start (seconds on a loaded machine) each round.
 * The child side is serveRequests; the test side startWorkers.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { createInterface } from "node:readline";

/** The child: answer every request line with `handle`'s JSON line, in order, until stdin ends. */
export async function serveRequests(handle: (request: any) => Promise<Record<string, unknown>>): Promise<void> {
  process.stderr.write("ready\n");
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY })) {
    if (line.trim() === "") continue;
    process.stdout.write(`${JSON.stringify(await handle(JSON.parse(line)))}\n`);
  }
}

export interface Worker {
  /** Send one request; resolves with the worker's answer, parsed. */
  ask(request: unknown): Promise<any>;
}

export interface Workers {
  readonly workers: readonly Worker[];
  /** Send `requests[i]` to worker i, all in the same tick, and wait for every answer. */
  round(requests: readonly unknown[]): Promise<any[]>;
  /** End every worker (stdin closed, then SIGKILL if it lingers) and wait for it to exit. */
  close(): Promise<void>;
}

function startWorker(
  script: string,
  cwd: string,
): { worker: Worker; proc: ChildProcessWithoutNullStreams; ready: Promise<void> } {
  const proc = spawn(process.execPath, ["--import", "tsx", script], { cwd, stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  let buffered = "";
  const waiting: { resolve: (value: any) => void; reject: (error: Error) => void }[] = [];
  let exited: Error | null = null;
  const ready = new Promise<void>((resolve, reject) => {
    proc.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes("ready\n")) resolve();
    });
    proc.on("exit", (code, signal) => {
      exited = new Error(`worker ${script} exited (${code ?? signal}): ${stderr.slice(-4000)}`);
      reject(exited);
      for (const each of waiting.splice(0)) each.reject(exited);
    });
  });
  proc.stdout.on("data", (chunk: Buffer) => {
    buffered += chunk.toString();
    for (let end = buffered.indexOf("\n"); end >= 0; end = buffered.indexOf("\n")) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      const next = waiting.shift();
      if (!next) continue;
      try {
        next.resolve(JSON.parse(line));
      } catch {
        next.reject(new Error(`worker ${script} answered ${line}; stderr: ${stderr.slice(-4000)}`));
      }
    }
  });
  const worker: Worker = {
    ask(request) {
      if (exited) return Promise.reject(exited);
      return new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        proc.stdin.write(`${JSON.stringify(request)}\n`);
      });
    },
  };
  return { worker, proc, ready };
}

/** Start `count` workers running `script` (with tsx) and wait until each has loaded. */
export async function startWorkers(script: string, count: number, cwd: string): Promise<Workers> {
  const started = Array.from({ length: count }, () => startWorker(script, cwd));
  const close = async () => {
    await Promise.all(
      started.map(async ({ proc }) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return;
        const gone = new Promise((resolve) => proc.once("exit", resolve));
        proc.stdin.end();
        const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
        await gone;
        clearTimeout(timer);
      }),
    );
  };
  try {
    await Promise.all(started.map((each) => each.ready));
  } catch (error) {
    for (const { proc } of started) proc.kill("SIGKILL");
    throw error;
  }
  const workers = started.map((each) => each.worker);
  return {
    workers,
    round: (requests) => Promise.all(requests.map((request, index) => workers[index]!.ask(request))),
    close,
  };
}
