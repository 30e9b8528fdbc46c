// kfn's registry client against the real registry kfn builds (CNCF Distribution), run here on
// 127.0.0.1 with htpasswd auth: a push uploads the blobs and the manifest and answers the
// digest the registry serves it by; a second push uploads nothing; wrong credentials are
// refused with what to do. On the cluster: the node pulls from the cluster's registry and
// runs the same image imported under kfn.local afterwards. (Deploys by digest: the in-cluster e2e.)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ensureBinaries } from '../../cluster/build.ts';
import { baseRecipes, buildImage, importImages } from '../../cluster/images.ts';
import { nodePaths } from '../../cluster/node.ts';
import { startRegistry } from '../../cluster/registry.ts';
import { waitFor } from '../../core/clock.ts';
import { pushImage } from '../../cli/artifacts/push.ts';
import { loopbackRegistry } from '../support/loopback-registry.ts';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

test('a push to the real registry: blobs and manifest, by digest; nothing again the second time; wrong credentials refused', async (t) => {
  const { host, htpasswd } = await loopbackRegistry(t, { username: 'kfn', password: 'pa55word' });
  assert.match(htpasswd, /^kfn:\$2[aby]\$/, 'a bcrypt htpasswd line');
  const port = Number(host.split(':')[1]);

  const pause = baseRecipes(await ensureBinaries()).find((r) => r.name === 'pause')!;
  const image = buildImage(pause, await ensureBinaries());
  const credentials = { username: 'kfn', password: 'pa55word' };
  const first = await pushImage(image.tarball, `127.0.0.1:${port}/kfn/pause:1`, { credentials });
  assert.match(first.ref, new RegExp(`^127\\.0\\.0\\.1:${port}/kfn/pause@sha256:[0-9a-f]{64}$`));
  assert.ok(first.uploaded > 0);
  const auth = { authorization: `Basic ${Buffer.from('kfn:pa55word').toString('base64')}` };
  const served = await fetch(`http://127.0.0.1:${port}/v2/kfn/pause/manifests/1`, { headers: { ...auth, accept: 'application/vnd.oci.image.manifest.v1+json' } });
  assert.equal(served.status, 200);
  assert.equal(served.headers.get('docker-content-digest'), first.digest, 'the registry serves the tag by the digest kfn deploys by');
  const again = await pushImage(image.tarball, `127.0.0.1:${port}/kfn/pause:1`, { credentials });
  assert.equal(again.digest, first.digest);
  assert.equal(again.uploaded, 0, 'every blob was there already');
  await assert.rejects(pushImage(image.tarball, `127.0.0.1:${port}/kfn/pause:2`, { credentials: { username: 'kfn', password: 'wrong' } }), /refused the credentials of kfn for kfn\/pause \(HTTP 401\): check them/);
  await assert.rejects(pushImage(image.tarball, `127.0.0.1:${port}/kfn/pause:2`, { credentials: undefined }), /no credentials for it in the Docker config|refused the credentials/);
});

test('an image the node pulled from the registry runs from its kfn.local name too (the kubelet verifies no pull credentials here)', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'registry-pull');
  const registry = await startRegistry({ paths: cluster.paths, log: (line) => t.diagnostic(line) });
  const busybox = baseRecipes(await ensureBinaries()).find((r) => r.name === 'busybox')!;
  const image = buildImage(busybox, await ensureBinaries());
  const pushed = await pushImage(image.tarball, `${registry.host}/busybox:1.35`);
  const pod = async (name: string, ref: string) => {
    await api.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: { metadata: { name }, spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image: ref, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] } } });
    return waitFor(`pod ${name} (${ref}) running`, async () => {
      const p = await api.request<{ status?: { phase?: string; containerStatuses?: { state?: { waiting?: { reason?: string; message?: string } } }[] } }>('GET', `/api/v1/namespaces/${ns}/pods/${name}`);
      const waiting = p.status?.containerStatuses?.[0]?.state?.waiting;
      if (waiting?.reason && /Pull|Image/.test(waiting.reason)) throw new Error(`${waiting.reason}: ${waiting.message}`);
      return p.status?.phase === 'Running' ? p : undefined;
    }, { timeoutMs: 60_000 });
  };
  await pod('from-registry', pushed.ref);
  importImages(nodePaths(cluster.paths.dir).containerdSocket, [image.tarball]);
  await pod('from-kfn-local', image.ref);
});
