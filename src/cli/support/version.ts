import { readFileSync } from "node:fs";

/**
 * The package version, read from package.json next to dist/ (dist/cli → ../../).
 * Kept free of every other import: `oats --version` runs this and nothing else.
 */
export function packageVersion(): string {
  const text = readFileSync(new URL("../../../package.json", import.meta.url), "utf8");
  const version = (JSON.parse(text) as { version?: unknown }).version;
  if (typeof version !== "string") throw new Error("package.json has no version");
  return version;
}
