// Commands run alternately, each a fresh process, medians: node bench/probes/alternate.mjs
// '[["node","-e","0"],["node","dist/cli/bin.js","digest","/tmp/empty"]]' 21
import { spawnSync } from "node:child_process";
const cmds = JSON.parse(process.argv[2]);
const runs = Number(process.argv[3] ?? 21);
const times = cmds.map(() => []);
for (let r = 0; r < runs; r++)
  cmds.forEach((c, i) => {
    const t = performance.now();
    spawnSync(c[0], c.slice(1), { stdio: "ignore" });
    times[i].push(performance.now() - t);
  });
cmds.forEach((c, i) => {
  const s = times[i].sort((a, b) => a - b);
  console.log(s[s.length >> 1].toFixed(1).padStart(7), "ms", c.slice(1).join(" ").slice(-70));
});
