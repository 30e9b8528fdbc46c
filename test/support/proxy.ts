// A TCP proxy on 127.0.0.1 in front of the apiserver, to put network faults between one client
// and the cluster without touching anyone else's connections:
//   cut()      closes every connection and refuses new ones (a partition)
//   restore()  accepts connections again
//   freeze()   keeps existing connections open but stops forwarding bytes (a half-open
//              connection: the client sees silence, not an error); new connections work
// TLS passes through untouched, so the apiserver's certificate (which names 127.0.0.1) holds.
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

export interface FaultProxy {
  port: number;
  /** A copy of `kc` whose server is this proxy. */
  kubeConfig(kc: KubeConfig): KubeConfig;
  cut(): void;
  restore(): void;
  freeze(): void;
  close(): Promise<void>;
  connections(): number;
}

export async function startFaultProxy(targetPort: number): Promise<FaultProxy> {
  let refusing = false;
  const pairs = new Set<{ client: Socket; upstream: Socket; frozen: boolean }>();
  const server = createServer((client) => {
    if (refusing) return client.destroy();
    const upstream = connect({ host: '127.0.0.1', port: targetPort });
    const pair = { client, upstream, frozen: false };
    pairs.add(pair);
    const forward = (from: Socket, to: Socket) =>
      from.on('data', (chunk) => {
        if (!pair.frozen) to.write(chunk);
      });
    forward(client, upstream);
    forward(upstream, client);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const proxy: FaultProxy = {
    port,
    kubeConfig(kc) {
      const cluster = kc.getCurrentCluster()!;
      const user = kc.getCurrentUser()!;
      const out = new KubeConfig();
      out.loadFromOptions({
        clusters: [{ ...cluster, server: cluster.server.replace(/:\d+$/, `:${port}`) }],
        users: [user],
        contexts: [{ name: 'proxied', cluster: cluster.name, user: user.name }],
        currentContext: 'proxied',
      });
      return out;
    },
    cut() {
      refusing = true;
      for (const p of pairs) {
        p.client.destroy();
        p.upstream.destroy();
      }
      pairs.clear();
    },
    restore() {
      refusing = false;
    },
    freeze() {
      for (const p of pairs) p.frozen = true;
    },
    connections: () => pairs.size,
    close() {
      proxy.cut();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
