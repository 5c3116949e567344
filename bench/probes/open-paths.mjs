// Open and close every file of a tree through /proc/<pid>/fd/<dir>/ (the race-free open), by absolute path, and
// through /proc/self: node bench/probes/open-paths.mjs <dir>
import { openSync, closeSync, readdirSync, constants } from "node:fs";
import { join } from "node:path";
const root = process.argv[2];
const files = [];
(function walk(d) {
  for (const e of readdirSync(d, { withFileTypes: true })) {
    const p = join(d, e.name);
    if (e.isDirectory()) walk(p);
    else if (e.isFile()) files.push([d, e.name]);
  }
})(root);
const F = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const dfd = new Map();
for (const [d] of files) if (!dfd.has(d)) dfd.set(d, openSync(d, constants.O_RDONLY | constants.O_DIRECTORY));
const pid = process.pid;
for (let round = 0; round < 3; round++) {
  let t = performance.now();
  for (const [d, n] of files) closeSync(openSync(`/proc/${pid}/fd/${dfd.get(d)}/${n}`, F));
  const a = performance.now() - t;
  t = performance.now();
  for (const [d, n] of files) closeSync(openSync(`${d}/${n}`, F));
  const b = performance.now() - t;
  t = performance.now();
  for (const [d, n] of files) closeSync(openSync(`/proc/self/fd/${dfd.get(d)}/${n}`, F));
  const c = performance.now() - t;
  console.log(
    `${files.length} files: /proc/pid/fd ${a.toFixed(0)} ms, absolute ` +
      `${b.toFixed(0)} ms, /proc/self ${c.toFixed(0)} ms`,
  );
}
