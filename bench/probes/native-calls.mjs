// The native small-file calls alone over a tree's directories, one thread against two (split): node
// bench/probes/native-calls.mjs [one|split] [dir]
import * as fs from "node:fs";
import { createRequire } from "node:module";
const native = createRequire(import.meta.url)("../../dist/native/oats.node");
const split = process.argv[2] === "split";
const root = process.argv[3] ?? "/tmp/oats-bench/data/small";
const FD = `/proc/${process.pid}/fd`;
const O = fs.constants;
const buffer = Buffer.allocUnsafe(1 << 20);
const meta = new Float64Array(128 * 4);
const directories = [];
function walk(dirFd) {
  const entries = fs.readdirSync(`${FD}/${dirFd}`, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1));
  const names = [];
  for (const entry of entries) {
    if (entry.isDirectory())
      walk(fs.openSync(`${FD}/${dirFd}/${entry.name}`, O.O_RDONLY | O.O_DIRECTORY | O.O_NOFOLLOW));
    else if (entry.isFile()) names.push(entry.name);
  }
  directories.push([dirFd, names]);
}
walk(fs.openSync(root, O.O_RDONLY | O.O_DIRECTORY));
for (let round = 0; round < 4; round++) {
  const started = performance.now();
  let files = 0;
  for (const [fd, names] of directories) {
    for (let at = 0; at < names.length; ) {
      const count = native.readSmallFiles(fd, names.slice(at, at + 128), buffer, 256 << 10, meta, split);
      if (count === 0 || meta[(count - 1) * 4] !== 0)
        throw new Error(`status ${meta[(count - 1) * 4]} at ${names[at + count - 1]}`);
      at += count;
      files += count;
    }
  }
  console.log(split ? "two threads" : "one thread", files, "files", (performance.now() - started).toFixed(1), "ms");
}
