import type { Command } from "commander";
import type { OatsError } from "../../core/index.js";
import type { Progress } from "./progress.js";

/** What every command gets: the scope and output mode, decided once by main. */
export interface CliContext {
  readonly scope: string;
  readonly json: boolean;
  readonly quiet: boolean;
  /** A progress line for long work (a silent one unless stderr is a TTY and neither --json nor --quiet). */
  progress(label: string): Progress;
  /** An AbortSignal that Ctrl-C aborts (src/cli/support/interrupt.ts), for commands that stage work and clean it up. */
  interruptSignal(): AbortSignal;
  /** The commands of the program that runs this one (what `oats completion` completes). */
  readonly commands: readonly CommandSpec[];
}

/** What a command hands back to be rendered: the JSON result and its human lines. */
export interface CommandOutcome {
  readonly result: unknown;
  /** stdout lines in human mode. */
  readonly lines: readonly string[];
  /** stdout lines under --quiet (none unless given). */
  readonly quietLines?: readonly string[];
  /** A refusal to report after the result lines (fsck finding damage). */
  readonly failure?: OatsError;
  /**
   * The process exit code of a success that is not 0: a command that ran a
   * child (`oats dispatch --exec`) passes the child's exit code through. It is
   * not a refusal: the result is still rendered as a success (ok: true).
   */
  readonly exitCode?: number;
  /** Warnings for stderr in human mode (`oats: warning: ...`), also under --quiet; the JSON result carries the same
   * facts. */
  readonly warnings?: readonly string[];
}

export interface CommandSpec {
  readonly name: string;
  /** Declare arguments and options on the (already named) subcommand. */
  define(command: Command): void;
  run(context: CliContext, operands: readonly string[], options: Record<string, unknown>): Promise<CommandOutcome>;
}
