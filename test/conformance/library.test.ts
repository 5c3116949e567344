/**
 * The conformance suite (issue 11) through the library driver, once per
 * transport. See docs/design/evidence.md, "Conformance suite".
 */
import { DELIVERY_MISSING, libraryDriver } from "./drivers/library.js";
import { TRANSPORTS } from "./drivers/transports.js";
import { registerSuite } from "./harness.js";

// Until evidence delivery is merged the drivers skip far-side delivery, by name; then nothing.
for (const transport of TRANSPORTS) registerSuite(libraryDriver(transport), DELIVERY_MISSING === null ? [] : ["far-side-delivery"]);
