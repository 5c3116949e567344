import { digest } from "./commands/digest.js";
import { createMain } from "./program.js";

/** `oats digest` alone, the entry of its own bundle (load-bundle.ts, fastCommandOf): the program with no other
 * command. */
export const main = createMain([digest]);
