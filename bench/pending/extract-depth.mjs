#!/usr/bin/env node
/**
 * Issue 14 bench row (standalone until the bench split into bench/sections/
 * lands; then this becomes a section file): extraction cost per entry must
 * not grow with path depth. An archive of 1,000 files at depth 200 (names
 * carried by pax headers) against one of 1,000 files at depth 2, both
 * extracted by extractTar (dist/) into fresh directories; runs alternate and
 * medians are compared. Goal: depth 200 <= 1.5x depth 2.
 *
 *   npm run build && node bench/pending/extract-depth.mjs [--runs 7]
 */
import { mkdtempSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";

const REPO = resolve(import.meta.dirname, "../..");
const { extractTar } = await import(join(REPO, "dist/acquisition/extract.js"));
const runs = Number(process.argv[process.argv.indexOf("--runs") + 1] || 7) || 7;

function header(name, type, size) {
  const h = Buffer.alloc(512);
  const octal = (value, offset, length) => h.write(`${value.toString(8).padStart(length - 1, "0")}\0`, offset, length);
  h.write(name, 0, 100);
  octal(type === "5" ? 0o755 : 0o644, 100, 8);
  octal(0, 108, 8);
  octal(0, 116, 8);
  octal(size, 124, 12);
  octal(0, 136, 12);
  h.fill(0x20, 148, 156);
  h.write(type, 156, 1);
  h.write("ustar\0", 257, 6);
  h.write("00", 263, 2);
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8);
  return h;
}
const pad = (n) => Buffer.alloc((512 - (n % 512)) % 512);
function paxPath(path) {
  const rest = ` path=${path}\n`;
  let length = Buffer.byteLength(rest) + 1;
  while (String(length).length + Buffer.byteLength(rest) !== length) length += 1;
  return Buffer.from(`${length}${rest}`);
}

/** `count` one-byte files at `depth` segments (package/ + depth-2 directories + the file). */
function archive(depth, count) {
  const dir = ["package", ...Array.from({ length: depth - 2 }, () => "d")].join("/");
  const parts = [];
  for (let i = 0; i < count; i++) {
    const record = paxPath(`${dir}/f${i}`);
    parts.push(header("PaxHeader", "x", record.length), record, pad(record.length));
    parts.push(header(`f${i}`, "0", 1), Buffer.from("x"), pad(1));
  }
  parts.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(parts));
}

const work = mkdtempSync(join(tmpdir(), "oats-bench-extract-"));
const sides = { shallow: archive(2, 1000), deep: archive(200, 1000) };
const times = { shallow: [], deep: [] };
let n = 0;
async function once(name) {
  const dest = join(work, `x${n++}`);
  mkdirSync(dest, { mode: 0o700 });
  const start = performance.now();
  await extractTar(Readable.from([sides[name]]), dest, { origin: name, prefix: "package" });
  const ms = performance.now() - start;
  rmSync(dest, { recursive: true, force: true });
  return ms;
}
await once("shallow");
await once("deep");
for (let i = 0; i < runs; i++) {
  const order = i % 2 === 0 ? ["shallow", "deep"] : ["deep", "shallow"];
  for (const name of order) times[name].push(await once(name));
}
rmSync(work, { recursive: true, force: true });
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const shallow = median(times.shallow);
const deep = median(times.deep);
const ratio = deep / shallow;
console.log(`14  extract 1,000 entries at depth 200 vs depth 2: ${deep.toFixed(1)} ms vs ${shallow.toFixed(1)} ms = ${ratio.toFixed(2)}x (goal <= 1.5x) ${ratio <= 1.5 ? "ok" : "MISSED"}`);
