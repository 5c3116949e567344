import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";
import { DIST, WORK, interleave, median, missingRow, removeTree, timeRow } from "../lib.mjs";

// ---------------------------------------------------------------- 14. extraction cost per entry vs depth

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

/** `count` one-byte files at `depth` segments (package/, depth-2 directories, the file), each named by a pax header. */
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

/**
 * The goal: an archive's cost must follow its size, not its depth. 1,000
 * entries at depth 200 against 1,000 at depth 2, both extracted by
 * extractTar into fresh directories. The ancestor check used to be
 * quadratic in depth for every entry (2.8x here); goal <= 1.5x.
 */
async function benchExtractDepth() {
  console.error("\n[14] extract 1,000 entries at depth 200 vs depth 2");
  let extractTar;
  try {
    ({ extractTar } = await import(join(DIST, "acquisition", "extract.js")));
  } catch {
    return missingRow("14", "extract 1,000 entries at depth 200 vs depth 2", "<= 1.5x", "extractTar is not built");
  }
  const out = join(WORK, "extract-depth");
  removeTree(out);
  mkdirSync(out, { recursive: true });
  const archives = { deep: archive(200, 1000), shallow: archive(2, 1000) };
  let n = 0;
  const side = (name) => ({
    name,
    inProcess: true,
    prepare: () => mkdirSync(join(out, `${name}-${++n}`), { mode: 0o700 }),
    run: () =>
      extractTar(Readable.from([archives[name]]), join(out, `${name}-${n}`), { origin: name, prefix: "package" }),
    cleanup: () => removeTree(join(out, `${name}-${n}`)),
  });
  const times = await interleave([side("deep"), side("shallow")], 7);
  removeTree(out);
  timeRow({
    id: "14",
    what: "extractTar: 1,000 entries at depth 200 vs 1,000 at depth 2",
    oursMs: median(times.deep),
    baseMs: median(times.shallow),
    goal: 1.5,
  });
}

export const parts = { "extract-depth": benchExtractDepth };
