export * from "./classification.js";
export * from "./chain-log.js";
export * from "./approvals.js";
export * from "./blobs.js";
