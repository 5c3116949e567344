"use strict";
/*
 * The CommonJS entry of oats-retention. The library is ES modules; Node
 * loads them with require() itself (require(esm), on by default from Node
 * 20.19 and 22.12), so this returns the very module `import` returns: one
 * OatsError class, one copy of every module, no dual-package hazard.
 */
if (!process.features.require_module) {
  throw new Error(
    "oats-retention: require() of this ES module needs Node >= 20.19 or " +
      "22.12 (or --experimental-require-module); use import() instead",
  );
}
module.exports = require("./public.js");
