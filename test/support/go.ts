/**
 * The start line for child processes that must run at the same moment: the
 * child has loaded everything when it says "ready" on stderr, and it waits
 * for one line on stdin, which the test writes to every child at once.
 */
export function waitForGo(): Promise<void> {
  return new Promise((resolve) => {
    process.stdin.once("data", () => {
      process.stdin.pause();
      resolve();
    });
    process.stderr.write("ready\n");
  });
}

export interface ChildResult {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * The test's side: start one `node --import tsx <script> <JSON input>` per
 * input, wait until every child is ready, then release them all at once and
 * collect their exit status and output.
 */
export async function runTogether(
  script: string,
  inputs: readonly unknown[],
  options: { cwd: string; env?: NodeJS.ProcessEnv },
): Promise<ChildResult[]> {
  const { spawn } = await import("node:child_process");
  const runs = inputs.map((input) => {
    const proc = spawn(process.execPath, ["--import", "tsx", script, JSON.stringify(input)], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    const ready = new Promise<void>((resolve, reject) => {
      proc.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
        if (stderr.includes("ready\n")) resolve();
      });
      proc.on("exit", () => reject(new Error(`child exited before ready: ${stderr}`)));
    });
    proc.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    const done = new Promise<ChildResult>((resolve) =>
      proc.on("close", (status) => resolve({ status, stdout, stderr })),
    );
    return { proc, ready, done };
  });
  await Promise.all(runs.map((run) => run.ready));
  for (const run of runs) run.proc.stdin.end("go\n");
  return Promise.all(runs.map((run) => run.done));
}
