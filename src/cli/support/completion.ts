import { Command } from "commander";
import type { CommandSpec } from "./context.js";

/**
 * Shell completion scripts, generated from the same command specs the parser
 * uses, so a new command or option completes without anyone editing a
 * script. Only words that are plain identifiers are emitted (command and
 * option names, choices): nothing from a description reaches the shell
 * unquoted, and fish descriptions are single-quoted with escapes.
 */

export const SHELLS = ["bash", "zsh", "fish"] as const;
export type Shell = (typeof SHELLS)[number];

interface OptionInfo {
  readonly long: string;
  readonly short?: string;
  readonly takesValue: boolean;
  readonly choices: readonly string[] | null;
  readonly description: string;
}

interface CommandInfo {
  readonly name: string;
  readonly description: string;
  readonly options: readonly OptionInfo[];
}

export interface CompletionModel {
  readonly top: readonly { name: string; description: string }[];
  readonly groups: Readonly<Record<string, readonly { name: string; description: string }[]>>;
  readonly commands: readonly CommandInfo[];
}

const WORD = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
const word = (text: string) => WORD.test(text);

const GLOBALS: readonly OptionInfo[] = [
  { long: "--scope", takesValue: true, choices: null, description: "deployment directory holding .agents/" },
  { long: "--json", takesValue: false, choices: null, description: "one JSON envelope line on stdout" },
  { long: "--quiet", takesValue: false, choices: null, description: "no progress, only the essential result" },
  { long: "--help", takesValue: false, choices: null, description: "help for the program or a command" },
  { long: "--version", takesValue: false, choices: null, description: "print the version" },
];

/** What each spec declares, read by defining it on a throwaway commander command. */
export function completionModel(
  specs: readonly CommandSpec[],
  groups: Readonly<Record<string, string>>,
  extra: readonly { name: string; description: string }[],
): CompletionModel {
  const commands: CommandInfo[] = specs.map((spec) => {
    const command = new Command(spec.name.split(" ").pop());
    spec.define(command);
    const options = command.options
      .filter((option) => option.long !== undefined && word(option.long.replace(/^--/, "")))
      .map((option) => ({
        long: option.long!,
        ...(option.short !== undefined && /^-[A-Za-z]$/.test(option.short) ? { short: option.short } : {}),
        takesValue: option.required || option.optional,
        choices: option.argChoices ? option.argChoices.filter(word) : null,
        description: option.description.split("\n")[0]!,
      }));
    return { name: spec.name, description: command.description().split("\n")[0]!, options };
  });
  const top: { name: string; description: string }[] = [];
  const grouped: Record<string, { name: string; description: string }[]> = {};
  for (const command of commands) {
    const [first, sub] = command.name.split(" ") as [string, string | undefined];
    if (sub === undefined) {
      top.push({ name: first, description: command.description });
      continue;
    }
    if (!Object.hasOwn(grouped, first)) {
      grouped[first] = [];
      top.push({ name: first, description: groups[first] ?? "" });
    }
    grouped[first]!.push({ name: sub, description: command.description });
  }
  top.push(...extra);
  return { top: top.filter((entry) => word(entry.name)), groups: grouped, commands };
}

function valueOptions(model: CompletionModel): string[] {
  const longs = new Set<string>(["--scope"]);
  for (const command of model.commands) {
    for (const option of command.options) {
      if (!option.takesValue) continue;
      longs.add(option.long);
      if (option.short !== undefined) longs.add(option.short);
    }
  }
  return [...longs].sort();
}

function choiceCases(model: CompletionModel, indent: string): string[] {
  const seen = new Map<string, readonly string[]>();
  for (const command of model.commands)
    for (const option of command.options)
      if (option.choices && !seen.has(option.long)) seen.set(option.long, option.choices);
  return [...seen].map(
    ([long, choices]) => `${indent}${long}) COMPREPLY=($(compgen -W "${choices.join(" ")}" -- "$cur")); return ;;`,
  );
}

function bash(model: CompletionModel): string {
  const groupNames = Object.keys(model.groups);
  const lines = [
    "# oats completion for bash. Load it with:  source <(oats completion bash)",
    "_oats() {",
    '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" i w',
    "  for ((i = 1; i < COMP_CWORD; i++)); do",
    '    w="${COMP_WORDS[i]}"',
    '    case "$w" in',
    `      ${valueOptions(model).join("|")}) ((i++)); continue ;;`,
    "      -*) continue ;;",
    "    esac",
    '    if [[ -z "$path" ]]; then path="$w"',
    `    elif [[ "$path" != *" "* ]] && [[ " ${groupNames.join(" ")} help " == *" $path "* ]]; then path="$path $w"`,
    "    else break",
    "    fi",
    "  done",
    '  case "$prev" in',
    '    --scope) COMPREPLY=($(compgen -d -- "$cur")); return ;;',
    ...choiceCases(model, "    "),
    "  esac",
    '  local opts="--scope --json --quiet --help"',
    '  case "$path" in',
    ...model.commands.map(
      (command) => `    "${command.name}") opts="$opts ${command.options.map((option) => option.long).join(" ")}" ;;`,
    ),
    "  esac",
    '  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur")); return; fi',
    '  case "$path" in',
    `    "") COMPREPLY=($(compgen -W "${model.top.map((entry) => entry.name).join(" ")}" -- "$cur")) ;;`,
    ...groupNames.map(
      (group) =>
        `    ${group}) COMPREPLY=($(compgen -W ` +
        `"${model.groups[group]!.map((entry) => entry.name).join(" ")}" -- ` +
        `"$cur")) ;;`,
    ),
    `    help) COMPREPLY=($(compgen -W "${model.top.map((entry) => entry.name).join(" ")}" -- "$cur")) ;;`,
    ...groupNames.map(
      (group) =>
        `    "help ${group}") COMPREPLY=($(compgen -W ` +
        `"${model.groups[group]!.map((entry) => entry.name).join(" ")}" -- ` +
        `"$cur")) ;;`,
    ),
    `    completion) COMPREPLY=($(compgen -W "${SHELLS.join(" ")}" -- "$cur")) ;;`,
    '    *) COMPREPLY=($(compgen -f -- "$cur")) ;;',
    "  esac",
    "}",
    "complete -o filenames -F _oats oats",
    "",
  ];
  return lines.join("\n");
}

function zsh(model: CompletionModel): string {
  return [
    "# oats completion for zsh (through zsh's bash completion layer). Load it with:  source <(oats completion zsh)",
    "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit; }",
    "autoload -U +X bashcompinit && bashcompinit",
    bash(model).split("\n").slice(1).join("\n"),
  ].join("\n");
}

const fishQuote = (text: string) => `'${text.replace(/[\\']/g, (char) => `\\${char}`)}'`;

function fish(model: CompletionModel): string {
  const groupNames = Object.keys(model.groups);
  const notGroups = groupNames.length ? `; and not __fish_seen_subcommand_from ${groupNames.join(" ")}` : "";
  const lines = [
    "# oats completion for fish. Load it with:  oats completion fish | source",
    "complete -c oats -e",
    "complete -c oats -l scope -r -f -a '(__fish_complete_directories)' -d 'deployment directory holding .agents/'",
    ...GLOBALS.filter((option) => option.long !== "--scope").map(
      (option) => `complete -c oats -l ${option.long.slice(2)} -d ${fishQuote(option.description)}`,
    ),
    ...model.top.map(
      (entry) => `complete -c oats -n __fish_use_subcommand -f -a ${entry.name} -d ${fishQuote(entry.description)}`,
    ),
    ...groupNames.flatMap((group) => {
      const subs = model.groups[group]!.map((entry) => entry.name);
      return model.groups[group]!.map(
        (entry) =>
          `complete -c oats -n ` +
          fishQuote(`__fish_seen_subcommand_from ${group}; and not __fish_seen_subcommand_from ${subs.join(" ")}`) +
          " " +
          `-f -a ${entry.name} -d ${fishQuote(entry.description)}`,
      );
    }),
    `complete -c oats -n ${fishQuote("__fish_seen_subcommand_from completion")} -f -a ${fishQuote(SHELLS.join(" "))}`,
    ...model.commands.flatMap((command) => {
      const [first, sub] = command.name.split(" ") as [string, string | undefined];
      const condition =
        sub === undefined
          ? `__fish_seen_subcommand_from ${first}${notGroups}`
          : `__fish_seen_subcommand_from ${first}; and __fish_seen_subcommand_from ${sub}`;
      return command.options.map((option) => {
        const value = option.takesValue
          ? option.choices
            ? ` -r -f -a ${fishQuote(option.choices.join(" "))}`
            : " -r"
          : "";
        return (
          `complete -c oats -n ${fishQuote(condition)} -l ` +
          `${option.long.slice(2)}${value} -d ${fishQuote(option.description)}`
        );
      });
    }),
    "",
  ];
  return lines.join("\n");
}

export function completionScript(shell: Shell, model: CompletionModel): string {
  return shell === "bash" ? bash(model) : shell === "zsh" ? zsh(model) : fish(model);
}
