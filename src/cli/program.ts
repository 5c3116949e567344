import { Command, CommanderError } from "commander";
import { resolve } from "node:path";
import type { OatsError } from "../core/index.js";
import type { CliContext, CommandOutcome, CommandSpec } from "./support/context.js";
import { asOatsError, failureEnvelope, successEnvelope, usageError } from "./support/envelope.js";
import { createProgress, progressEnabled } from "./support/progress.js";
import { createInterrupt, interruptedExit, interruptedLines } from "./support/interrupt.js";
import { isInterrupted } from "../retention/index.js";
import { humanError } from "./support/render.js";
import { packageVersion } from "./support/version.js";
import { GROUPS, VIRTUAL_COMMANDS } from "./support/groups.js";

export { GROUPS, VIRTUAL_COMMANDS } from "./support/groups.js";

/**
 * The CLI program: parse with commander, call the library, render. Commander
 * never writes or exits on its own here (exitOverride + configureOutput): its
 * help, version and parse errors are captured and rendered like every other
 * result, so in --json mode even `oats --json --bogus` is one envelope line.
 *
 * The program is made from a list of command specs: main.ts gives it all of
 * them; a hot command's own entry (main-verify.ts, main-digest.ts) gives it
 * that command alone, so its bundle holds and starts nothing else
 * (load-bundle.ts says when a run takes it).
 */

/**
 * `oats help resolution verify` is `oats resolution verify --help`, and
 * `oats version` (alone) is `oats --version`: the forms git and restic
 * users type. Global options may stand anywhere; only the first operand
 * decides.
 */
export function rewriteVirtualCommands(argv: readonly string[], commands: readonly CommandSpec[]): string[] {
  let first = -1;
  for (let index = 0; index < argv.length; index += 1) {
    const arg = argv[index]!;
    if (arg === "--") break;
    if (GLOBAL_VALUE_OPTIONS.has(arg)) {
      index += 1;
      continue;
    }
    if (arg.startsWith("-")) continue;
    first = index;
    break;
  }
  if (first === -1) return [...argv];
  const word = argv[first];
  const rest = [...argv.slice(0, first), ...argv.slice(first + 1)];
  if (word === "help") {
    // `oats help bogus` is the usage error `oats bogus` gives, not the program's help with exit 0.
    const named = rest.slice(first).find((arg) => !arg.startsWith("-"));
    const known =
      named === undefined ||
      Object.hasOwn(GROUPS, named) ||
      commands.some((spec) => spec.name === named) ||
      VIRTUAL_COMMANDS.some((entry) => entry.name === named);
    return known ? [...rest, "--help"] : rest;
  }
  if (word === "version" && !rest.some((arg) => !arg.startsWith("-"))) return [...rest, "--version"];
  return [...argv];
}

export interface MainIo {
  /** --json was on the command line (detected by bin.ts before anything was loaded). */
  readonly json: boolean;
  /** The real stdout: in JSON mode the only writer allowed on it. */
  readonly writeOut: (text: string) => void;
  readonly writeErr?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
}

/** Options of the program itself that take a value, so their value is not mistaken for the command. */
const GLOBAL_VALUE_OPTIONS = new Set(["--scope"]);

/**
 * The command the arguments name, if any (for the envelope's `command` when
 * parsing failed): "verify", "resolution verify", or the bare group
 * ("resolution") when its subcommand is missing or unknown.
 */
export function commandNamed(argv: readonly string[], commands: readonly CommandSpec[]): string | null {
  let group: string | null = null;
  for (let index = 0; index < argv.length; index += 1) {
    const arg = argv[index]!;
    if (arg === "--") return group;
    if (GLOBAL_VALUE_OPTIONS.has(arg)) {
      index += 1;
      continue;
    }
    if (arg.startsWith("-")) continue;
    if (group !== null) {
      const name = `${group} ${arg}`;
      return commands.some((spec) => spec.name === name) ? name : group;
    }
    if (Object.hasOwn(GROUPS, arg)) {
      group = arg;
      continue;
    }
    return commands.some((spec) => spec.name === arg) ? arg : null;
  }
  return group;
}

const SUCCESSFUL_EXITS = new Set(["commander.helpDisplayed", "commander.help", "commander.version"]);

export type Main = (argv: readonly string[], io: MainIo) => Promise<number>;

/** The program of `commands`: what `main` runs for one command line. */
export const createMain =
  (commands: readonly CommandSpec[]): Main =>
  (argv, io) =>
    runProgram(commands, argv, io);

async function runProgram(commands: readonly CommandSpec[], givenArgv: readonly string[], io: MainIo): Promise<number> {
  const argv = rewriteVirtualCommands(givenArgv, commands);
  const { json, writeOut } = io;
  const writeErr = io.writeErr ?? ((text: string) => void process.stderr.write(text));
  const env = io.env ?? process.env;
  let captured = "";
  let outcome: CommandOutcome | undefined;
  let ran: string | null = null;
  let quiet = false;
  const interrupt = createInterrupt(writeErr);

  const program = new Command("oats")
    .description("content-addressed artifact retention: keep verified, immutable copies of what an agent will run")
    .version(packageVersion(), "-V, --version", "print the version")
    .option("--scope <dir>", "deployment directory holding .agents/ (default: $OATS_SCOPE, else the working directory)")
    .option("--json", "print exactly one JSON envelope line on stdout")
    .option("--quiet", "no progress and only the essential result line")
    .exitOverride()
    .configureOutput({
      writeOut: (text) => {
        captured += text;
      },
      writeErr: (text) => {
        captured += text;
      },
      outputError: () => {},
    })
    .showSuggestionAfterError(true);

  const groups = new Map<string, Command>();
  const commandFor = (name: string): Command => {
    const [group, sub] = name.split(" ");
    if (sub === undefined) return program.command(name);
    let parent = groups.get(group!);
    if (!parent) {
      parent = program.command(group!).description(GROUPS[group!] ?? "");
      groups.set(group!, parent);
    }
    return parent.command(sub);
  };

  for (const spec of commands) {
    const command = commandFor(spec.name);
    spec.define(command);
    command.action(async (...args: unknown[]) => {
      const self = args[args.length - 1] as Command;
      const globals = self.optsWithGlobals<{ scope?: string; quiet?: boolean }>();
      ran = spec.name;
      quiet = globals.quiet === true;
      const context: CliContext = {
        scope: resolve(globals.scope ?? (env["OATS_SCOPE"] || process.cwd())),
        json,
        quiet,
        progress: (label) => createProgress(label, progressEnabled({ json, quiet })),
        interruptSignal: () => interrupt.signal(),
        commands,
      };
      outcome = await spec.run(context, self.processedArgs as string[], self.opts());
    });
  }

  const fail = (error: OatsError, name: string | null): number => {
    if (isInterrupted(error)) {
      const signal = interrupt.received();
      if (json) writeOut(`${failureEnvelope(name, { ...error.toJSON(), details: { ...error.details, signal } })}\n`);
      else for (const line of interruptedLines(error)) writeErr(line);
      return interruptedExit(signal);
    }
    if (json) writeOut(`${failureEnvelope(name, error.toJSON())}\n`);
    else writeErr(humanError(error, name));
    return error.exitCode;
  };

  try {
    await program.parseAsync([...argv], { from: "user" });
  } catch (error) {
    interrupt.release();
    const name = ran ?? commandNamed(argv, commands);
    if (!(error instanceof CommanderError)) return fail(asOatsError(error), name);
    if (SUCCESSFUL_EXITS.has(error.code) && error.exitCode === 0) {
      if (json) {
        const result = error.code === "commander.version" ? { version: packageVersion() } : { help: captured };
        writeOut(`${successEnvelope(name ?? (error.code === "commander.version" ? "version" : "help"), result)}\n`);
      } else {
        writeOut(captured);
      }
      return 0;
    }
    const message = error.code === "commander.help" ? "a command is required" : error.message.replace(/^error:\s*/, "");
    return fail(usageError(message, { reason: error.code }), name);
  }

  interrupt.release();
  const name = ran ?? commandNamed(argv, commands);
  if (!outcome) return fail(usageError("a command is required"), name);
  const done: CommandOutcome = outcome;
  // A command that passes a child's exit code through (dispatch --exec) succeeded even when that code is not 0.
  const exitCode = done.exitCode ?? 0;
  if (json) {
    if (done.failure) return fail(done.failure, name);
    writeOut(`${successEnvelope(name, done.result)}\n`);
    return exitCode;
  }
  for (const warning of done.warnings ?? []) writeErr(`oats: warning: ${warning}\n`);
  const lines = quiet ? (done.quietLines ?? []) : done.lines;
  if (lines.length) writeOut(`${lines.join("\n")}\n`);
  return done.failure ? fail(done.failure, name) : exitCode;
}
