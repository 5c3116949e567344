/** Descriptions of the command groups (`oats resolution --help`). */
export const GROUPS: Record<string, string> = {
  resolution: "resolution records: what an instance or a queued capture will run (show, verify, ls)",
  instance: "instances and the resolution each one runs (show)",
  capture: "captures: pin what a queued capture will run (prepare); approve it with `oats approve`",
  queue: "queued capture jobs, each naming a capture resolution (add, ls)",
  run: "runs of dispatched captures: the sealed record and stamped log of each (ls, show, verify, cancel, seal)",
  audit: "the hash-chained audit log of the capture flow (show, verify, head)",
  outbox: "the run-evidence outbox: sealed runs queued for delivery by `oats push` (ls)",
  key: "this account's Ed25519 signing key, kept in the operator's private state (generate, show)",
  trust: "the keys this operator trusts in this scope, for approvals or runs (add, ls, rm)",
  attestation: "signed statements of approvals and runs, own and pulled (ls, verify)",
  source: "source trees (souls and others) keyed by their qualified identity (retain)",
};

/** Words the program answers without a command spec: `oats help [<group>] [<sub>]`, `oats version`. */
export const VIRTUAL_COMMANDS: readonly { name: string; description: string }[] = [
  { name: "help", description: "help for the program, a command or a subcommand (oats help resolution verify)" },
  { name: "version", description: "print the version" },
];
