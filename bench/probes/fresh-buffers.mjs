// The page faults of fresh buffers against one reused buffer: node bench/probes/fresh-buffers.mjs [count=69]
const n = Number(process.argv[2] ?? 69);
let t = performance.now();
for (let i = 0; i < n; i++) Buffer.allocUnsafe(1 << 20).fill(i);
console.log(`${n} fresh 1 MiB buffers filled: ${(performance.now() - t).toFixed(1)} ms`);
const kept = Buffer.allocUnsafe(1 << 20);
t = performance.now();
for (let i = 0; i < n; i++) kept.fill(i);
console.log(`one 1 MiB buffer filled ${n} times: ${(performance.now() - t).toFixed(1)} ms`);
