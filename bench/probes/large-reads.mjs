// Read and hash the bench's 8 x 128 MiB data set (npm run bench makes it) one way, medians of 5:
// node bench/probes/large-reads.mjs async|sync <chunk KiB>
import { openSync, readSync, closeSync, read } from "node:fs";
import { createHash } from "node:crypto";
const files = Array.from(
  { length: 8 },
  (_, i) => `${process.env.OATS_BENCH_DIR ?? "/tmp/oats-bench"}/data/big/blob-${i}.bin`,
);
const mode = process.argv[2];
const size = Number(process.argv[3]) << 10;
const readAsync = (fd, b, len, pos) =>
  new Promise((res, rej) => read(fd, b, 0, len, pos, (e, n) => (e ? rej(e) : res(n))));
async function once() {
  const h = createHash("sha256");
  for (const f of files) {
    const fd = openSync(f, "r");
    if (mode === "sync") {
      const b = Buffer.allocUnsafe(size);
      let pos = 0;
      for (;;) {
        const n = readSync(fd, b, 0, size, pos);
        if (!n) break;
        pos += n;
        h.update(b.subarray(0, n));
      }
    } else {
      const bs = [Buffer.allocUnsafe(size), Buffer.allocUnsafe(size)];
      let pos = 0,
        turn = 0;
      let p = readAsync(fd, bs[0], size, 0);
      for (;;) {
        const n = await p;
        if (!n) break;
        const cur = bs[turn];
        pos += n;
        turn ^= 1;
        p = readAsync(fd, bs[turn], size, pos);
        h.update(cur.subarray(0, n));
      }
    }
    closeSync(fd);
  }
  return h.digest("hex");
}
await once();
const r = [];
for (let i = 0; i < 5; i++) {
  const c = process.cpuUsage();
  const t = performance.now();
  await once();
  const u = process.cpuUsage(c);
  r.push([performance.now() - t, (u.user + u.system) / 1000]);
}
r.sort((a, b) => a[0] - b[0]);
console.log(mode, size >> 10, "KiB wall", r[2][0].toFixed(0), "cpu", r[2][1].toFixed(0));
