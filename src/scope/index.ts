export { fsckScope, type ScopeFsckCounts, type ScopeFsckOptions, type ScopeFsckReport } from "./fsck.js";
export {
  FINDING_CLASSES,
  SEVERITY_ORDER,
  mostSerious,
  type Finding,
  type FindingClass,
  type FindingKind,
} from "./findings.js";
