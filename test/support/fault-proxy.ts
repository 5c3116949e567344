import net from "node:net";

/**
 * A TCP proxy between the client and a real registry that cuts one
 * connection once, after `cutAfter` bytes have gone from client to
 * registry in total: the registry sees a body stop mid-PATCH or mid-PUT and
 * the client sees its socket reset, as with a dropped link.
 */
export interface FaultProxy {
  readonly port: number;
  /** Connections cut so far (0 or 1). */
  readonly cuts: number;
  /** Bytes the client sent through the proxy. */
  readonly forwarded: number;
  close(): Promise<void>;
}

/** `cutAfter` bytes, or `{ request, nth }`: cut as the nth request with that method starts, forwarding none of it. */
export async function startFaultProxy(
  targetPort: number,
  cutAfter: number | { request: string; nth: number },
  /** Called once, as the connection is cut (before the client can see it). */
  onCut: () => void = () => undefined,
): Promise<FaultProxy> {
  let forwarded = 0;
  let cuts = 0;
  let seen = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    const cut = (): void => {
      onCut();
      client.resetAndDestroy();
      upstream.destroy();
    };
    client.on("data", (chunk: Buffer) => {
      if (typeof cutAfter === "object") {
        if (
          cuts === 0 &&
          chunk.subarray(0, cutAfter.request.length + 1).toString("latin1") === `${cutAfter.request} ` &&
          ++seen === cutAfter.nth
        ) {
          cuts++;
          cut();
          return;
        }
      } else if (cuts === 0 && forwarded + chunk.length > cutAfter) {
        const keep = cutAfter - forwarded;
        forwarded += keep;
        cuts++;
        upstream.write(chunk.subarray(0, keep), cut);
        return;
      }
      forwarded += chunk.length;
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => client.write(chunk));
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.on("close", () => sockets.delete(client));
    upstream.on("close", () => sockets.delete(upstream));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    get cuts() {
      return cuts;
    },
    get forwarded() {
      return forwarded;
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
