export * from "./classification.js";
export * from "./chain-log.js";
