// An image built on a base as ko and jib build them, against the real registry kfn builds (CNCF
// Distribution), run here on 127.0.0.1 with a user and password and no cluster: a small base
// made by the test (a rootfs layer and a config, for two platforms under one index) is pushed
// to it; a function image is built on it and pushed; the manifest pulled back by digest names
// the base's layers then the bundle's, the config appends the diff_id and runs the bundle. In
// one registry the base's layer is mounted (nothing sent again); in another it is copied. The
// same bundle on the same base is the same digest, and a second push sends nothing. A base that
// cannot be pulled names the reference, the registry and the HTTP status.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { imageFromTarball, RegistryClient, sha256 } from '../../cli/artifacts/push.ts';
import { layerFromFiles, mediaTypes, nodeEntrypoint, parsePlatform, pullBase, pushOnBase, writeImageTarball, type ImageConfigFile, type ImageManifest } from '../../cli/artifacts/oci-image.ts';
import { loopbackRegistry } from '../support/loopback-registry.ts';

const credentials = { username: 'kfn', password: 'pa55word' };

/** A registry of its own on 127.0.0.1, asking for `credentials`; its host:port. */
const startRegistry = async (t: TestContext) => (await loopbackRegistry(t, credentials)).host;

/** Pushes a tiny base for `architecture` (a script and /etc/passwd; Node's place taken by a file) as an OCI image; its manifest digest. */
async function pushBase(registry: string, architecture: string): Promise<{ digest: string; size: number; layer: string }> {
  const client = new RegistryClient(registry, 'base/node', credentials);
  const layer = await layerFromFiles([
    { path: '/usr/local/bin/node', content: Buffer.from(`#!/bin/sh\necho node for ${architecture}\n`), mode: 0o755 },
    { path: '/etc/passwd', content: Buffer.from('root:x:0:0:root:/root:/bin/sh\n') },
  ]);
  const config: ImageConfigFile = { architecture, os: 'linux', config: { Entrypoint: ['/usr/local/bin/node'], Env: ['PATH=/usr/local/bin:/usr/bin:/bin'], User: 'node' }, rootfs: { type: 'layers', diff_ids: [layer.diffId] }, history: [{ created_by: 'the test' }] };
  const configBytes = Buffer.from(JSON.stringify(config));
  await client.putBlob({ digest: layer.digest, size: layer.size, open: () => layer.blob });
  await client.putBlob({ digest: sha256(configBytes), size: configBytes.length, open: () => configBytes });
  const manifest: ImageManifest = { schemaVersion: 2, mediaType: mediaTypes.ociManifest, config: { mediaType: mediaTypes.ociConfig, digest: sha256(configBytes), size: configBytes.length }, layers: [{ mediaType: mediaTypes.ociLayerGzip, digest: layer.digest, size: layer.size }] };
  const bytes = Buffer.from(JSON.stringify(manifest));
  return { digest: await client.putManifest(`24-${architecture}`, bytes, mediaTypes.ociManifest), size: bytes.length, layer: layer.digest };
}

test('a function image on a base from the registry: pushed by digest, the base\'s layers mounted or copied, the same digest twice, a missing base named', async (t) => {
  const registry = await startRegistry(t);
  const amd64 = await pushBase(registry, 'amd64');
  const arm64 = await pushBase(registry, 'arm64');
  const index = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: mediaTypes.ociIndex, manifests: [
    { mediaType: mediaTypes.ociManifest, digest: arm64.digest, size: arm64.size, platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } },
    { mediaType: mediaTypes.ociManifest, digest: amd64.digest, size: amd64.size, platform: { os: 'linux', architecture: 'amd64' } },
  ] }));
  await new RegistryClient(registry, 'base/node', credentials).putManifest('24', index, mediaTypes.ociIndex);

  const baseRef = `${registry}/base/node:24`;
  const base = await pullBase(baseRef, parsePlatform('linux/amd64'), credentials);
  assert.equal(base.digest, amd64.digest, 'the index resolved to linux/amd64');
  assert.equal((await pullBase(baseRef, parsePlatform('linux/arm64'), credentials)).digest, arm64.digest);

  const bundle = await layerFromFiles([{ path: '/app/fn.mjs', content: Buffer.from('console.log("reconcile");\n') }, { path: '/app/chunk-1.mjs', content: Buffer.from('export {};\n') }]);
  const image = { base, layer: bundle, createdBy: 'kfn: the bundle of greetings in /app', change: (c: ImageConfigFile) => ({ entrypoint: nodeEntrypoint(c, '/app/fn.mjs'), env: { NODE_ENV: 'production' }, workingDir: '/app', user: '65532' }) };
  const target = { registry, repository: 'team/fn-greetings', tag: '0.1.0' };
  const started = performance.now();
  const pushed = await pushOnBase(image, target, { credentials, log: (line) => t.diagnostic(line) });
  t.diagnostic(`built on the base and pushed in ${((performance.now() - started) / 1000).toFixed(2)} s`);
  assert.match(pushed.ref, new RegExp(`^${registry.replace(/\./g, '\\.')}/team/fn-greetings@sha256:[0-9a-f]{64}$`));
  assert.deepEqual([pushed.mounted, pushed.copied], [1, 0], 'one registry: the base\'s layer mounted from base/node, not sent');

  // Pulled back by digest, as the node pulls it.
  const client = new RegistryClient(registry, 'team/fn-greetings', credentials);
  const got = await client.manifest(pushed.digest, 'the pushed image');
  assert.equal(got.mediaType, mediaTypes.ociManifest);
  const manifest = JSON.parse(got.bytes.toString()) as ImageManifest;
  assert.deepEqual(manifest.layers.map((l) => l.digest), [amd64.layer, bundle.digest]);
  const config = JSON.parse((await client.blob(manifest.config.digest, 'the pushed image')).toString()) as ImageConfigFile;
  assert.deepEqual(config.rootfs.diff_ids.at(-1), bundle.diffId);
  assert.equal(config.rootfs.diff_ids.length, 2);
  assert.deepEqual(config.config?.Entrypoint, ['/usr/local/bin/node', '/app/fn.mjs'], 'the base\'s own node runs the bundle');
  assert.deepEqual([config.config?.User, config.config?.WorkingDir, config.architecture], ['65532', '/app', 'amd64']);
  assert.deepEqual(config.history?.map((h) => h.created_by), ['the test', 'kfn: the bundle of greetings in /app']);
  const stream = await client.blobStream(bundle.digest, 'the pushed image');
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  assert.equal(sha256(Buffer.concat(chunks)), bundle.digest);
  assert.ok(gunzipSync(Buffer.concat(chunks)).includes('console.log("reconcile")'));

  // Again, the same input: the same digest, nothing sent.
  const again = await pushOnBase({ ...image, layer: await layerFromFiles([{ path: '/app/chunk-1.mjs', content: Buffer.from('export {};\n') }, { path: '/app/fn.mjs', content: Buffer.from('console.log("reconcile");\n') }]) }, target, { credentials });
  assert.equal(again.digest, pushed.digest, 'a reproducible image');
  assert.equal(again.uploaded, 0);

  // Another registry: the base's layer is copied from the first (streamed, checked by its digest there).
  const other = await startRegistry(t);
  const copiedTo = await pushOnBase(image, { ...target, registry: other }, { credentials, log: (line) => t.diagnostic(line) });
  assert.deepEqual([copiedTo.mounted, copiedTo.copied], [0, 1]);
  assert.equal(copiedTo.digest, pushed.digest, 'the same image in both registries');
  assert.ok(await new RegistryClient(other, 'team/fn-greetings', credentials).hasBlob(amd64.layer));

  // For a node that imports files (kfn image build --base): the same image as a tarball, the base's layer downloaded into it.
  const dir = mkdtempSync(join(tmpdir(), 'kfn-oci-tarball-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const written = await writeImageTarball(image, 'kfn.local/fn-greetings:0.1.0', join(dir, 'image.tar'));
  const fromTarball = imageFromTarball(join(dir, 'image.tar'));
  assert.deepEqual(fromTarball.layers.map((l) => l.digest), [amd64.layer, bundle.digest]);
  assert.equal(fromTarball.config.digest, manifest.config.digest, 'the config the registry has');
  assert.equal(written.configDigest, manifest.config.digest);

  // A base that cannot be pulled: which, where, and the status.
  await assert.rejects(pullBase(`${registry}/base/missing:1`, parsePlatform('linux/amd64'), credentials), (err: Error) => {
    assert.match(err.message, new RegExp(`the base image ${registry.replace(/\./g, '\\.')}/base/missing:1 from ${registry.replace(/\./g, '\\.')} \\(HTTP 404\\)`));
    assert.match(err.message, /--base/);
    return true;
  });
  await assert.rejects(pullBase(baseRef, parsePlatform('linux/s390x'), credentials), /has no image for linux\/s390x; it has linux\/arm64\/v8, linux\/amd64/);
  await assert.rejects(pullBase(baseRef, parsePlatform('linux/amd64'), { username: 'kfn', password: 'wrong' }), /refused the credentials of kfn for base\/node \(HTTP 401\)/);
});
