import type { StdioOptions } from "node:child_process";
import { constants } from "node:os";
import { OatsError } from "../core/index.js";
import type { DispatchPlan } from "./dispatch.js";
import { privilegeGate } from "./privilege.js";
import { releaseDispatchHold } from "./dispatch-hold.js";
import { removeRunCopy } from "./run-copy.js";

/**
 * Run a plan (refused as root unless the plan is privileged: privilege.ts):
 * exactly its command, argv and env, from its run copy (the
 * working directory is the copy's root), with stdio passed through, never
 * through a shell. Resolves with the child's exit code (128 + signal number
 * when it was killed by a signal). `stdio` may also be spawn's array form,
 * e.g. `["inherit", 2, "inherit"]` to send the child's stdout to this
 * process's stderr (the CLI's --json mode keeps stdout for its envelope).
 * When the child has ended (or could not start) the run copy is removed,
 * unless `keep`; `kept` names the directory left behind.
 */
export async function runDispatchPlan(
  plan: DispatchPlan,
  options: { stdio?: "inherit" | "pipe" | StdioOptions; keep?: boolean; euid?: number } = {},
): Promise<{ code: number; stdout: string; stderr: string; kept: string | null }> {
  let outcome: { code: number; stdout: string; stderr: string };
  try {
    // Again here: a plan resolved without `exec` may still be handed to this function.
    privilegeGate({ capture: plan.composition.key, privileged: plan.privileged, euid: options.euid ?? plan.euid });
    outcome = await new Promise((resolvePromise, reject) => {
      // Loaded here, not at the top: commands that only load this layer start without it.
      const child = process
        .getBuiltinModule("node:child_process")
        .spawn(plan.executable.command, [...plan.executable.argv], {
          cwd: plan.run.cwd,
          env: { ...plan.env },
          stdio: options.stdio ?? "inherit",
          shell: false,
        });
      let stdout = "";
      let stderr = "";
      child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
      child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      child.on("error", (error) =>
        reject(
          new OatsError(
            "invalid-artifact",
            `cannot start ${plan.executable.command}: ${error.message}`,
            { command: plan.executable.command, errno: (error as NodeJS.ErrnoException).code },
            { cause: error },
          ),
        ),
      );
      child.on("close", (code, signal) => {
        resolvePromise({ code: code ?? 128 + (signal ? constants.signals[signal] : 0), stdout, stderr });
      });
    });
  } finally {
    if (options.keep !== true) await discardDispatchPlan(plan);
  }
  return { ...outcome, kept: options.keep === true ? plan.run.dir : null };
}

/** Remove the run copy of a plan that will not be run (or has run), and let its lease go. Idempotent. */
export async function discardDispatchPlan(plan: Pick<DispatchPlan, "run">): Promise<void> {
  try {
    await removeRunCopy(plan.run);
  } finally {
    await releaseDispatchHold(plan);
  }
}
