import http from "node:http";
import type net from "node:net";

/**
 * A hostile or broken registry for the bad-input tests: a plain HTTP server
 * on a loopback address whose every answer the test writes. It records the
 * requests it saw (method, path, headers) so a test can show what never
 * reached it.
 */
export interface FakeRegistry {
  readonly port: number;
  readonly host: string;
  readonly requests: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: Buffer }>;
  close(): Promise<void>;
}

export type Handler = (request: http.IncomingMessage, response: http.ServerResponse, body: Buffer) => void;

export async function startFakeRegistry(handler: Handler, address = "127.0.0.1"): Promise<FakeRegistry> {
  const requests: FakeRegistry["requests"] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: request.method ?? "", url: request.url ?? "", headers: request.headers, body });
      handler(request, response, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, address, resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    host: `${address}:${port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
