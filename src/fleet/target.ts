import { parseOciReference, RegistrySession } from "../oci/index.js";

/** A registry repository named by an `oci://` (or loopback `http://`) reference, with its session. */
export interface FleetTarget {
  /** `host[:port]` */
  readonly registry: string;
  readonly repository: string;
  readonly tag: string | null;
  readonly digest: string | null;
  readonly session: RegistrySession;
}

/** `signal` abandons every exchange of the session at once (Ctrl-C). */
export function openRegistry(
  reference: string,
  options: { insecure?: boolean; signal?: AbortSignal | undefined } = {},
): FleetTarget {
  const parsed = parseOciReference(reference);
  const session = new RegistrySession(parsed, {
    insecure: options.insecure === true,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return {
    registry: parsed.registry.host,
    repository: parsed.repository,
    tag: parsed.tag,
    digest: parsed.digest,
    session,
  };
}
