export { gc, DEFAULT_GRACE_MS, type GcOptions, type GcItem, type GcReport } from "./gc.js";
export {
  pin,
  unpin,
  listPins,
  parsePinRef,
  pinRefText,
  PINS_DIR,
  type Pin,
  type PinRef,
  type PinResult,
} from "./pins.js";
export { collectRoots, reachableFrom, recordClosure, compositionBlob, type RootSet, type Reachable } from "./roots.js";
export { gcWhy, type GcWhy, type KeptBy } from "./why.js";
export { repair, QUARANTINE_DIR, type RepairOptions, type RepairResult } from "./repair.js";
export { readPin } from "./pins.js";
