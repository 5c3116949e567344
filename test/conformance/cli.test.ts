/**
 * The conformance suite through the CLI driver (dist/cli/bin.js
 * as real child processes; `npm run build` first), over the dir transport.
 * Every transport runs the whole suite through the library driver
 * (library.test.ts); `oats push --to` is one command whatever the scheme, and
 * a CLI suite costs a few hundred process starts, so it runs over one.
 */
import { PROPERTY_NAMES } from "./driver.js";
import { cliDriver } from "./drivers/cli.js";
import { TRANSPORTS } from "./drivers/transports.js";
import { registerSuite } from "./harness.js";

// As root (the tests' account) nothing is skipped; without root the driver cannot become its operator (nobody) and
// skips everything, by name.
const expected = process.getuid?.() === 0 ? [] : [...PROPERTY_NAMES];
for (const transport of TRANSPORTS.filter((candidate) => candidate.name === "dir"))
  registerSuite(cliDriver(transport), expected);
