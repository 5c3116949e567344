import http from "node:http";
import type net from "node:net";

/**
 * An HTTP proxy in front of a real registry that can answer a request
 * itself instead of forwarding it: a registry that is briefly wrong (a 5xx,
 * a blob it has just lost track of, a HEAD that claims a blob it lacks) on
 * demand. Everything it does not answer goes to the registry unchanged. It
 * records every request line, so a test can count what was asked again.
 */
export interface Answer {
  readonly status: number;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

export interface InterceptingProxy {
  readonly host: string;
  readonly seen: Array<{ method: string; path: string; answered: boolean }>;
  close(): Promise<void>;
}

export type Intercept = (request: { method: string; path: string }) => Answer | null;

export async function startInterceptingProxy(targetPort: number, intercept: Intercept): Promise<InterceptingProxy> {
  const seen: InterceptingProxy["seen"] = [];
  const server = http.createServer((request, response) => {
    const method = request.method ?? "";
    const path = request.url ?? "/";
    const answer = intercept({ method, path });
    seen.push({ method, path, answered: answer !== null });
    if (answer !== null) {
      request.resume();
      request.on("end", () =>
        response
          .writeHead(answer.status, { "content-type": "application/json", ...answer.headers })
          .end(answer.body ?? ""),
      );
      return;
    }
    const upstream = http.request(
      { host: "127.0.0.1", port: targetPort, method, path, headers: request.headers },
      (reply) => {
        response.writeHead(reply.statusCode ?? 502, reply.headers);
        reply.pipe(response);
      },
    );
    upstream.on("error", () => response.destroy());
    request.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    host: `127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A distribution-spec error body with these codes. */
export function registryErrors(...codes: string[]): string {
  return JSON.stringify({ errors: codes.map((code) => ({ code, message: "injected by the test proxy" })) });
}
