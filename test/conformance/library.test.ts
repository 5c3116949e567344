/**
 * The conformance suite through the library driver, once per
 * transport. See docs/design/evidence.md, "Conformance suite".
 */
import { libraryDriver } from "./drivers/library.js";
import { TRANSPORTS } from "./drivers/transports.js";
import { registerSuite } from "./harness.js";

// Nothing is skipped: the library driver observes every property.
for (const transport of TRANSPORTS) registerSuite(libraryDriver(transport), []);
