import { verify } from "./commands/verify.js";
import { createMain } from "./program.js";

/** `oats verify` alone, the entry of its own bundle (load-bundle.ts, fastCommandOf): the program with no other
 * command. */
export const main = createMain([verify]);
