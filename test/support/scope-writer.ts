/**
 * A writer of the scope that is not oats, for the trust tests
 * (test/evidence-scope-writer.test.ts). Run as `nobody` by a root operator's
 * test, with write access to the part of the scope it attacks:
 *
 *   node --import tsx test/support/scope-writer.ts '<json request>'
 *
 * It uses oats' own formats (a copy of oats' code is no secret) but writes
 * files directly, never through oats. Requests:
 *
 * - { attack: "plant-run", runs, from, suffix, dispatcher?, child }: copy the
 *   sealed run directory `from` to a new handle (its last 8 hex `suffix`), delete its record.json, cut its
 *   log's footer, and rewrite its control.json: the dispatcher is dead
 *   (or `dispatcher`, when given, a live pid), the "child" is the process
 *   group leader `child` (its start time read from /proc, as anyone can).
 *   Prints the new handle.
 * - { attack: "forge-entry", entries }: replace the one outbox entry with a
 *   fabricated one for the same handle, job, composition and approval: an OK
 *   log, a new record and run-end line, every digest recomputed. Prints the
 *   forged run id.
 * - { attack: "cancel-file", dir }: create `cancel` in a run directory.
 * - { attack: "plant-received", from, to }: put a run's three evidence files
 *   (self-consistent: a forged outbox entry's) in a received-runs directory.
 * - { attack: "plant-mark", outbox, to }: mark the one outbox entry as
 *   delivered to `to` (read back there), as oats writes a mark.
 * - { attack: "plant-job", queue, from, job, policy? }: write a job `job`
 *   into the queue directory as oats writes one (canonical JSON), copying
 *   the queued job `from` (its resolution, recurrence and time), with its
 *   recurrence policy set to `policy` when given; `job` may be `from` itself
 *   (the job re-pointed in place).
 */
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { bytesDigest, canonicalJson, canonicalJsonBytes } from "../../src/core/canonical-json.js";
import { entryHash } from "../../src/ledger/chain-line.js";
import { sealRecord, type RunRecord } from "../../src/evidence/run-record.js";

type Request =
  | {
      attack: "plant-run";
      runs: string;
      from: string;
      suffix: string;
      dispatcher?: number;
      child: number;
    }
  | { attack: "forge-entry"; entries: string }
  | { attack: "cancel-file"; dir: string }
  | { attack: "plant-received"; from: string; to: string }
  | { attack: "plant-mark"; outbox: string; to: string }
  | { attack: "plant-job"; queue: string; from: string; job: string; policy?: string };

const request = JSON.parse(process.argv[2] ?? "{}") as Request;

function startTime(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  return stat
    .slice(stat.lastIndexOf(")") + 2)
    .trim()
    .split(" ")[19]!;
}

function plantRun(runs: string, from: string, suffix: string, child: number, dispatcher?: number): string {
  const handle = from.replace(/-[0-9a-f]{8}$/, `-${suffix}`);
  const dir = join(runs, handle);
  cpSync(join(runs, from), dir, { recursive: true });
  rmSync(join(dir, "record.json"));
  const log = readFileSync(join(dir, "log"), "utf8");
  writeFileSync(join(dir, "log"), log.slice(0, log.search(/^# /m)));
  const control = JSON.parse(readFileSync(join(dir, "control.json"), "utf8"));
  control.dispatcher =
    dispatcher === undefined ? { pid: process.pid, start: "1" } : { pid: dispatcher, start: startTime(dispatcher) };
  control.child = { pid: child, start: startTime(child) };
  control.base.handle = handle;
  writeFileSync(join(dir, "control.json"), JSON.stringify(control));
  return handle;
}

function forgeEntry(entries: string): string {
  const [name] = readdirSync(entries).filter((entry) => !entry.startsWith("."));
  const real = join(entries, name!);
  const entry = JSON.parse(readFileSync(join(real, "entry.json"), "utf8"));
  const record = JSON.parse(readFileSync(join(real, "record.json"), "utf8")) as RunRecord;
  const stamp = record.startedAt.replace(/(\d)Z$/, (_, d: string) => `${(Number(d) + 1) % 10}Z`);
  const log = Buffer.from(`${stamp} out all checks passed\n# exit: code 0\n# RESULT: OK\n`, "utf8");
  const forged: RunRecord = {
    ...record,
    exit: { code: 0, signal: null },
    result: "OK",
    log: { digest: bytesDigest(log), lines: 1, bytes: log.length },
  };
  const { bytes: recordBytes, id } = sealRecord(forged);
  const lines = readFileSync(join(real, "audit.jsonl"), "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line));
  const audit = lines
    .map((line) => {
      if (line.action !== "run-end") return line;
      const end = {
        ...line,
        details: { ...line.details, runId: id, exit: { code: 0, signal: null }, result: "OK", log: forged.log },
      };
      return { ...end, hash: entryHash(end) };
    })
    .map((line) => canonicalJson(line))
    .join("");
  const auditBytes = Buffer.from(audit, "utf8");
  const files = [
    { name: "record.json", digest: bytesDigest(recordBytes), bytes: recordBytes.length },
    { name: "log", digest: bytesDigest(log), bytes: log.length },
    { name: "audit.jsonl", digest: bytesDigest(auditBytes), bytes: auditBytes.length },
  ];
  const dir = join(entries, `${String(entry.seq).padStart(12, "0")}-${id.slice("sha256-".length)}`);
  mkdirSync(dir, { mode: 0o700 });
  writeFileSync(join(dir, "record.json"), recordBytes);
  writeFileSync(join(dir, "log"), log);
  writeFileSync(join(dir, "audit.jsonl"), auditBytes);
  writeFileSync(join(dir, "entry.json"), canonicalJsonBytes({ ...entry, runId: id, files }));
  rmSync(real, { recursive: true });
  return id;
}

function plantMark(outbox: string, to: string): void {
  const entries = join(outbox, "entries");
  const [name] = readdirSync(entries).filter((entry) => !entry.startsWith("."));
  const entry = JSON.parse(readFileSync(join(entries, name!, "entry.json"), "utf8"));
  const key = bytesDigest(Buffer.from(to)).slice("sha256-".length, "sha256-".length + 32);
  const dir = join(outbox, "delivered", key);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const mark = {
    format: "oats.outbox-delivery.v1",
    seq: entry.seq,
    runId: entry.runId,
    to,
    at: new Date().toISOString(),
    files: entry.files.map((file: { name: string; digest: string }) => ({ name: file.name, digest: file.digest })),
  };
  writeFileSync(join(dir, `${name}.json`), canonicalJsonBytes(mark));
}

function plantJob(queue: string, from: string, job: string, policy?: string): void {
  const queued = JSON.parse(readFileSync(join(queue, `${from}.json`), "utf8"));
  const recurrence = policy === undefined ? queued.recurrence : { ...queued.recurrence, policy };
  const path = join(queue, `${job}.json`);
  rmSync(path, { force: true });
  writeFileSync(path, canonicalJsonBytes({ ...queued, job, recurrence }));
}

if (request.attack === "plant-run")
  process.stdout.write(`${plantRun(request.runs, request.from, request.suffix, request.child, request.dispatcher)}\n`);
else if (request.attack === "forge-entry") process.stdout.write(`${forgeEntry(request.entries)}\n`);
else if (request.attack === "plant-received") {
  mkdirSync(request.to, { mode: 0o700 });
  for (const name of ["record.json", "log", "audit.jsonl"]) cpSync(join(request.from, name), join(request.to, name));
} else if (request.attack === "plant-mark") plantMark(request.outbox, request.to);
else if (request.attack === "plant-job") plantJob(request.queue, request.from, request.job, request.policy);
else writeFileSync(join(request.dir, "cancel"), "now\n");
