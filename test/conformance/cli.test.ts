/**
 * The conformance suite (issue 11) through the CLI driver (dist/cli/bin.js
 * as real child processes; `npm run build` first), once per transport.
 */
import { cliDriver } from "./drivers/cli.js";
import { DELIVERY_MISSING } from "./drivers/library.js";
import { TRANSPORTS } from "./drivers/transports.js";
import { registerSuite } from "./harness.js";

// Until evidence delivery is merged the drivers skip far-side delivery, by name; then nothing.
for (const transport of TRANSPORTS) registerSuite(cliDriver(transport), DELIVERY_MISSING === null ? [] : ["far-side-delivery"]);
