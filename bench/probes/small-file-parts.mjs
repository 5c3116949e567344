// Where a small file's read goes, over a tree of small files (medians of 9 passes):
// node bench/probes/small-file-parts.mjs open|open+stat|read|nohash|all <tree>
import { openSync, fstatSync, readSync, closeSync, readdirSync, constants } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
const root = process.argv[3] ?? "/tmp/oats-bench/data/small";
const F = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const D = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
const groups = [];
function walk(d) {
  const fd = openSync(d, D);
  const names = [];
  for (const e of readdirSync(d, { withFileTypes: true })) {
    if (e.isDirectory()) walk(join(d, e.name));
    else names.push(e.name);
  }
  groups.push({ d, fd, names });
}
walk(root);
const buf = Buffer.allocUnsafe(256 << 10);
const _statArr = new Float64Array(20);
const mode = process.argv[2];
function run() {
  const h = createHash("sha256");
  const t = performance.now();
  for (const g of groups) {
    for (const n of g.names) {
      const p = `/proc/${process.pid}/fd/${g.fd}/${n}`;
      const fd = openSync(p, F);
      if (mode === "open") {
        closeSync(fd);
        continue;
      }
      const b = fstatSync(fd);
      if (mode === "open+stat") {
        closeSync(fd);
        continue;
      }
      const got = readSync(fd, buf, 0, b.size, 0);
      if (mode === "read") {
        closeSync(fd);
        continue;
      }
      const _a = fstatSync(fd);
      closeSync(fd);
      if (mode === "nohash") continue;
      h.update(buf.subarray(0, got));
    }
  }
  return performance.now() - t;
}
const times = [];
for (let i = 0; i < 9; i++) times.push(run());
times.sort((a, b) => a - b);
console.log(mode, "median", times[4].toFixed(0));
