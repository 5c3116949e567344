export { pushToRegistry, type PushOptions, type PushReport } from "./push.js";
export { pullFromRegistry, type PullOptions, type PullReport } from "./pull.js";
export * from "./mapping.js";
