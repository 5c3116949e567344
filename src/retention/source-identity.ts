import { jsonDigest } from "./digest/json.js";

/** The store key of a qualified source identity: the 64 hex of its oats.json.v1 digest. */
export function sourceIdentityKey(identity: string): string {
  return jsonDigest(identity).slice("sha256-".length);
}
