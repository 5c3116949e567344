/**
 * Delivery of run evidence (issue 11, "the far side"): the outbox, the
 * transports, the push and the dispatch posture. One entry point for the
 * library index and the CLI, so the CLI loads it only when asked.
 */
export { enqueueSealedRun, outboxEntries, outboxWritable, OUTBOX_STORE, type EnqueueResult, type OutboxEntry, type OutboxFile } from "./outbox.js";
export { checkReadBack, listOutbox, pushEvidence, readDelivered, type OutboxListing, type PushOptions, type PushResult } from "./push.js";
export { EVIDENCE_FILES, transportFor, type EvidenceBundle, type EvidenceFileName, type EvidenceTransport, type ProbeResult, type TransportContext } from "./transport.js";
export { evidencePosture, type DeliveryPosture, type FarSide, type Posture, type PostureInput } from "./posture.js";
export { checkEvidencePosture, evidenceDestination, type EvidencePostureOptions, type EvidencePostureResult } from "./posture-check.js";
export { dirTransport, type DirTransportOptions } from "./transports/dir.js";
