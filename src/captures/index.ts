export * from "./classification.js";
