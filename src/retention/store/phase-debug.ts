// TEMPORARY profiling aid (not to be committed)
let last = performance.now();
export function phase(name: string): void {
  if (!process.env["OATS_PHASES"]) return;
  const now = performance.now();
  process.stderr.write(`[phase] ${name}: ${(now - last).toFixed(1)} ms\n`);
  last = now;
}
