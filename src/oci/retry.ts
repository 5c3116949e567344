import type { IncomingMessage } from "node:http";
import { abortedError } from "./http.js";

/**
 * When a registry's answer is worth asking again. A registry under load, or
 * one whose storage is briefly inconsistent (CNCF distribution's filesystem
 * driver rewrites a blob's link file in place, so a second writer of the
 * same blob makes it read as unknown for a moment), answers 429 or 5xx for
 * a request that will succeed a moment later. Only requests that can be
 * repeated without changing the outcome are asked again, a bounded number
 * of times with growing waits; anything else is the caller's refusal.
 */

export const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([429, 500, 502, 503, 504]);

export interface RetryPolicy {
  /** Further attempts after the first (default 3). */
  readonly retries: number;
  /** Milliseconds before retry n (0-based); grows fourfold from `baseDelayMs`. */
  readonly baseDelayMs: number;
  /** A registry's Retry-After is honoured up to this many milliseconds. */
  readonly maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 3, baseDelayMs: 50, maxDelayMs: 5_000 };

export function isTransientStatus(status: number): boolean {
  return TRANSIENT_STATUSES.has(status);
}

/** The wait before retry `attempt`: the registry's Retry-After (seconds) when it gives one, else the backoff; never
 * above the policy's cap. */
export function retryDelay(policy: RetryPolicy, attempt: number, response?: IncomingMessage): number {
  const backoff = policy.baseDelayMs * 4 ** attempt;
  const header = response?.headers["retry-after"];
  const asked = typeof header === "string" && /^\d{1,6}$/.test(header.trim()) ? Number(header.trim()) * 1000 : 0;
  return Math.min(policy.maxDelayMs, Math.max(backoff, asked));
}

/** Wait `ms`; an aborted `signal` ends the wait at once with its error (http.ts, abortedError). */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(abortedError(signal));
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(abortedError(signal!));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
