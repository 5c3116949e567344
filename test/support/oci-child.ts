import { randomBytes } from "node:crypto";
import { OatsError } from "../../src/core/errors.js";
import { bufferSource, OciClient, sha256Digest } from "../../src/oci/index.js";

/**
 * A client in its own process, for what must be set before Node starts:
 * NODE_EXTRA_CA_CERTS adds a test CA to the trust store the client uses by
 * default. Uploads one blob to argv[2] and reads it back; prints JSON.
 */
const reference = process.argv[2]!;
try {
  const client = new OciClient(reference);
  const bytes = randomBytes(1234);
  await client.putBlob(bufferSource(bytes, sha256Digest(bytes)));
  const back = await client.getBlobBytes(sha256Digest(bytes), { maxBytes: 4096 });
  process.stdout.write(JSON.stringify({ ok: back.equals(bytes), origin: client.session.origin }));
} catch (error) {
  process.stdout.write(
    JSON.stringify({ ok: false, error: error instanceof OatsError ? error.toJSON() : String(error) }),
  );
}
