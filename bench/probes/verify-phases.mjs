// node bench/probes/verify-phases.mjs <oats arguments...>   (as root, `sync; echo 3 > /proc/sys/vm/drop_caches` first
// for a cold run)
/**
 * One CLI command, timed by phase as dist/cli/bin.js runs it (docs/design/performance.md,
 * "The CLI's start: bundles and code caches"): node's own start (process start to this
 * script's first line), the loader imported, the bundle and its code cache
 * loaded, and main (parse, the library loaded, the command), each with the
 * minor page faults the process took in it; then the same command again in
 * this process, which shows what the first call paid once. Output goes to
 * stderr; the command's own to nowhere.
 */
import { performance } from "node:perf_hooks";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const faults = () => process.resourceUsage().minorPageFault;
const args = process.argv.slice(2);
const start = performance.now();
const atStart = faults();
const dist = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "dist");
const { loadBundle, fastCommandOf } = await import(join(dist, "cli", "load-bundle.js"));
const imported = performance.now();
const atImport = faults();
const { main } = loadBundle({ command: fastCommandOf(args) });
const loaded = performance.now();
const atLoad = faults();
const code = await main(args, { json: false, writeOut: () => {}, writeErr: () => {} });
const ran = performance.now();
const atRun = faults();
await main(args, { json: false, writeOut: () => {}, writeErr: () => {} });
const again = performance.now() - ran;
const ms = (value) => `${value.toFixed(1)} ms`;
console.error(
  `exit ${code}: node's start ${ms(start)} (${atStart} faults), loader ` +
    `${ms(imported - start)} (${atImport - atStart}), bundle ` +
    `${ms(loaded - imported)} (${atLoad - atImport}), main ` +
    `${ms(ran - loaded)} (${atRun - atLoad}); the same command again ` +
    `${ms(again)} (${faults() - atRun})`,
);
