// An image made as ko and jib make them, without a registry: the bundle's layer (the same bytes
// for the same files, whatever their times and owners on disk; entries sorted, owned by root,
// modes kept to 0755/0644), the config composed on the base's (diff_ids and history appended,
// the entrypoint Node running the bundle, the base's environment kept), the manifest in the
// base's own flavour naming the base's layers then the bundle's, and the platform picked out of
// a multi-arch index. (Against a real registry: test/integration/oci-image.test.ts.)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { extract } from 'tar-stream';
import { chooseBase, chooseManifest, composeConfig, defaultBase, composeManifest, layerFromDirectory, functionNodeFlags, layerFromFiles, mediaTypes, nodeEntrypoint, parseImageReference, parsePlatform, type ImageConfigFile, type ImageIndex, type ImageManifest } from './oci-image.ts';

const sha = (b: Uint8Array) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** The entries of a tar: name, type, mode, owner, mtime and content. */
async function entries(tar: Buffer) {
  const out: { name: string; type: string; mode: number; uid: number; gid: number; mtime: number; content: string }[] = [];
  const ex = extract();
  const done = (async () => {
    for await (const entry of ex) {
      const chunks: Buffer[] = [];
      for await (const c of entry) chunks.push(c as Buffer);
      const h = entry.header;
      out.push({ name: h.name, type: h.type, mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime.getTime(), content: Buffer.concat(chunks).toString() });
    }
  })();
  ex.end(tar);
  await done;
  return out;
}

test('the bundle layer: sorted entries under /app, owned by root at the epoch, 0755 dirs and executables, 0644 files; the same digest for the same files', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-layer-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'chunks'));
  writeFileSync(join(dir, 'fn.mjs'), 'import "./chunks/a.mjs";\n');
  writeFileSync(join(dir, 'chunks', 'a.mjs'), 'export {};\n');
  writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(dir, 'run.sh'), 0o700);
  chmodSync(join(dir, 'fn.mjs'), 0o600);
  const layer = await layerFromDirectory(dir, '/app');
  assert.equal(layer.digest, sha(layer.blob), 'the digest is of the compressed blob');
  const tar = gunzipSync(layer.blob);
  assert.equal(layer.diffId, sha(tar), 'the diff_id is of the uncompressed tar');
  assert.equal(layer.size, layer.blob.length);
  assert.deepEqual(await entries(tar), [
    { name: 'app/', type: 'directory', mode: 0o755, uid: 0, gid: 0, mtime: 0, content: '' },
    { name: 'app/chunks/', type: 'directory', mode: 0o755, uid: 0, gid: 0, mtime: 0, content: '' },
    { name: 'app/chunks/a.mjs', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, content: 'export {};\n' },
    { name: 'app/fn.mjs', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, content: 'import "./chunks/a.mjs";\n' },
    { name: 'app/run.sh', type: 'file', mode: 0o755, uid: 0, gid: 0, mtime: 0, content: '#!/bin/sh\n' },
  ]);
  // Other times and modes on disk, files written in another order: the same layer.
  utimesSync(join(dir, 'fn.mjs'), new Date(2001, 1, 1), new Date(2001, 1, 1));
  chmodSync(join(dir, 'fn.mjs'), 0o664);
  assert.equal((await layerFromDirectory(dir, '/app')).digest, layer.digest);
  const again = await layerFromFiles([
    { path: '/app/run.sh', content: Buffer.from('#!/bin/sh\n'), mode: 0o755 },
    { path: '/app/fn.mjs', content: Buffer.from('import "./chunks/a.mjs";\n') },
    { path: '/app/chunks/a.mjs', content: Buffer.from('export {};\n') },
  ]);
  assert.equal(again.digest, layer.digest, 'files given in any order make the same layer');
  writeFileSync(join(dir, 'fn.mjs'), 'changed\n');
  assert.notEqual((await layerFromDirectory(dir, '/app')).digest, layer.digest, 'other content, another digest');
  // The gzip header carries no time and a fixed OS byte (fflate writes the same bytes on every machine).
  assert.deepEqual([...layer.blob.subarray(0, 4)], [0x1f, 0x8b, 8, 0]);
  assert.deepEqual([...layer.blob.subarray(4, 8)], [0, 0, 0, 0], 'no mtime in the gzip header');
});

const baseConfig: ImageConfigFile = {
  architecture: 'amd64',
  os: 'linux',
  created: '2026-01-02T03:04:05Z',
  config: { Entrypoint: ['docker-entrypoint.sh'], Cmd: ['node'], Env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'NODE_VERSION=24.1.0', 'NODE_ENV=development'], WorkingDir: '/', User: 'node', Labels: { maintainer: 'someone' } },
  rootfs: { type: 'layers', diff_ids: ['sha256:aaaa', 'sha256:bbbb'] },
  history: [{ created_by: 'ADD rootfs' }, { created_by: 'ENV NODE_VERSION', empty_layer: true }, { created_by: 'RUN install node' }],
};

test('the config: the base\'s, with the layer\'s diff_id and a history entry appended, Node running the bundle as a non-root uid, the base\'s environment kept', () => {
  const entrypoint = nodeEntrypoint(baseConfig, '/app/fn.mjs');
  assert.deepEqual(entrypoint, ['node', '/app/fn.mjs'], 'the official node images: node from the PATH (their entrypoint is a shell script)');
  assert.deepEqual(nodeEntrypoint({ ...baseConfig, config: { Entrypoint: ['/nodejs/bin/node'] } }, '/app/fn.mjs'), ['/nodejs/bin/node', '/app/fn.mjs'], 'distroless: its own node');
  assert.deepEqual(nodeEntrypoint({ ...baseConfig, config: { Entrypoint: ['/usr/local/bin/node'] } }, '/app/kfn.mjs'), ['/usr/local/bin/node', '/app/kfn.mjs'], 'kfn\'s own Node image');
  assert.deepEqual(nodeEntrypoint(baseConfig, '/app/fn.mjs', functionNodeFlags), ['node', '--max-semi-space-size=1', '--optimize-for-size', '/app/fn.mjs'], 'a function\'s V8 flags before its bundle');
  assert.deepEqual(nodeEntrypoint({ ...baseConfig, config: { Entrypoint: ['/nodejs/bin/node'] } }, '/app/fn.mjs', functionNodeFlags), ['/nodejs/bin/node', '--max-semi-space-size=1', '--optimize-for-size', '/app/fn.mjs']);
  const config = composeConfig(baseConfig, { diffId: 'sha256:cccc' }, { entrypoint, env: { NODE_ENV: 'production' }, workingDir: '/app', user: '65532' }, 'kfn: the bundle of greetings in /app');
  assert.deepEqual(config.rootfs, { type: 'layers', diff_ids: ['sha256:aaaa', 'sha256:bbbb', 'sha256:cccc'] });
  assert.deepEqual(config.history?.at(-1), { created: '1970-01-01T00:00:00Z', created_by: 'kfn: the bundle of greetings in /app', comment: 'kfn' });
  assert.equal(config.history?.length, 4);
  assert.equal(config.created, '1970-01-01T00:00:00Z', 'a fixed time, as ko and jib write: the same input, the same image digest');
  assert.deepEqual(config.config?.Entrypoint, ['node', '/app/fn.mjs']);
  assert.equal(config.config?.Cmd, undefined, 'the base\'s Cmd would be passed to the bundle as arguments');
  assert.deepEqual(config.config?.Env, ['PATH=/usr/local/bin:/usr/bin:/bin', 'NODE_VERSION=24.1.0', 'NODE_ENV=production']);
  assert.equal(config.config?.WorkingDir, '/app');
  assert.equal(config.config?.User, '65532', 'numeric, so the kubelet can check runAsNonRoot');
  assert.deepEqual(config.config?.Labels, { maintainer: 'someone' }, 'what kfn does not change is kept');
  assert.deepEqual([config.os, config.architecture], ['linux', 'amd64']);
  assert.deepEqual(baseConfig.rootfs.diff_ids, ['sha256:aaaa', 'sha256:bbbb'], 'the base is not changed');
  assert.throws(() => composeConfig({ ...baseConfig, rootfs: { type: 'layers', diff_ids: ['sha256:aaaa'] } }, { diffId: 'sha256:cccc' }, { entrypoint }, 'x', 2), /config names 1 layer.*manifest names 2/);
});

test('the manifest: the base\'s layers by digest, then the bundle\'s, in the base\'s flavour (OCI or Docker)', () => {
  const baseLayers = [
    { mediaType: mediaTypes.ociLayerGzip, digest: 'sha256:1111', size: 10 },
    { mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd', digest: 'sha256:2222', size: 20, annotations: { a: 'b' } },
  ];
  const oci: ImageManifest = { schemaVersion: 2, mediaType: mediaTypes.ociManifest, config: { mediaType: mediaTypes.ociConfig, digest: 'sha256:9999', size: 5 }, layers: baseLayers, annotations: { 'org.opencontainers.image.base.name': 'x' } };
  const config = Buffer.from('{"rootfs":{}}');
  const layer = { digest: 'sha256:3333', size: 30 };
  const made = composeManifest(oci, mediaTypes.ociManifest, config, layer);
  assert.equal(made.mediaType, mediaTypes.ociManifest);
  const m = JSON.parse(made.bytes.toString()) as ImageManifest;
  assert.equal(m.mediaType, mediaTypes.ociManifest);
  assert.deepEqual(m.config, { mediaType: mediaTypes.ociConfig, digest: sha(config), size: config.length });
  assert.deepEqual(m.layers, [...baseLayers, { mediaType: mediaTypes.ociLayerGzip, digest: 'sha256:3333', size: 30 }]);
  assert.equal(m.annotations, undefined, 'the base\'s annotations describe the base, not this image');
  assert.equal(made.digest, sha(made.bytes));

  const docker: ImageManifest = { schemaVersion: 2, mediaType: mediaTypes.dockerManifest, config: { mediaType: mediaTypes.dockerConfig, digest: 'sha256:9999', size: 5 }, layers: [{ mediaType: mediaTypes.dockerLayerGzip, digest: 'sha256:1111', size: 10 }] };
  const d = composeManifest(docker, mediaTypes.dockerManifest, config, layer);
  assert.equal(d.mediaType, mediaTypes.dockerManifest);
  const dm = JSON.parse(d.bytes.toString()) as ImageManifest;
  assert.deepEqual([dm.config.mediaType, ...dm.layers.map((l) => l.mediaType)], [mediaTypes.dockerConfig, mediaTypes.dockerLayerGzip, mediaTypes.dockerLayerGzip]);
});

test('a multi-arch index: the platform asked for (linux/amd64 unless told), a variant when named; a missing one lists what there is', () => {
  const index: ImageIndex = {
    schemaVersion: 2,
    mediaType: mediaTypes.ociIndex,
    manifests: [
      { mediaType: mediaTypes.ociManifest, digest: 'sha256:arm7', size: 1, platform: { os: 'linux', architecture: 'arm', variant: 'v7' } },
      { mediaType: mediaTypes.ociManifest, digest: 'sha256:amd', size: 1, platform: { os: 'linux', architecture: 'amd64' } },
      { mediaType: mediaTypes.ociManifest, digest: 'sha256:arm64', size: 1, platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } },
      { mediaType: mediaTypes.ociManifest, digest: 'sha256:att', size: 1, platform: { os: 'unknown', architecture: 'unknown' }, annotations: { 'vnd.docker.reference.type': 'attestation-manifest' } },
    ],
  };
  assert.deepEqual(parsePlatform('linux/amd64'), { os: 'linux', architecture: 'amd64' });
  assert.deepEqual(parsePlatform('linux/arm64/v8'), { os: 'linux', architecture: 'arm64', variant: 'v8' });
  assert.throws(() => parsePlatform('amd64'), /os\/architecture/);
  assert.equal(chooseManifest(index, parsePlatform('linux/amd64'), 'r/node:24').digest, 'sha256:amd');
  assert.equal(chooseManifest(index, parsePlatform('linux/arm64'), 'r/node:24').digest, 'sha256:arm64');
  assert.equal(chooseManifest(index, parsePlatform('linux/arm/v7'), 'r/node:24').digest, 'sha256:arm7');
  assert.throws(() => chooseManifest(index, parsePlatform('linux/s390x'), 'r/node:24'), /r\/node:24 has no image for linux\/s390x; it has linux\/arm\/v7, linux\/amd64, linux\/arm64\/v8/);
});

test('base references as Docker and ko read them: Docker Hub by default, library/ for official images, a tag or a digest', () => {
  assert.deepEqual(parseImageReference('node:24-slim'), { registry: 'docker.io', repository: 'library/node', reference: '24-slim' });
  assert.deepEqual(parseImageReference('docker.io/library/node:24-slim'), { registry: 'docker.io', repository: 'library/node', reference: '24-slim' });
  assert.deepEqual(parseImageReference('gcr.io/distroless/nodejs24-debian12'), { registry: 'gcr.io', repository: 'distroless/nodejs24-debian12', reference: 'latest' });
  assert.deepEqual(parseImageReference('127.0.0.1:5000/base/node:24'), { registry: '127.0.0.1:5000', repository: 'base/node', reference: '24' });
  assert.deepEqual(parseImageReference('localhost/node'), { registry: 'localhost', repository: 'node', reference: 'latest' });
  const digest = `sha256:${'a'.repeat(64)}`;
  assert.deepEqual(parseImageReference(`ghcr.io/o/node:24@${digest}`), { registry: 'ghcr.io', repository: 'o/node', reference: digest });
  assert.throws(() => parseImageReference('Node:24'), /not an image reference/);
  assert.throws(() => parseImageReference('r.io/node@sha256:xyz'), /not an image reference/);
});

test('the base: --base, else the project\'s package.json "kfn": {"base"}, else Node 24 slim; in kfn\'s checkout with neither, kfn\'s own image', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-base-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'functions', 'x'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'p' }));
  const cwd = join(dir, 'functions', 'x');
  assert.deepEqual(chooseBase(undefined, { cwd, checkout: false }), { ref: defaultBase, from: 'the default' });
  assert.equal(chooseBase(undefined, { cwd, checkout: true }), undefined);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'p', kfn: { base: 'ghcr.io/team/node:24' } }));
  assert.deepEqual(chooseBase(undefined, { cwd, checkout: true }), { ref: 'ghcr.io/team/node:24', from: `"kfn": {"base"} of ${join(dir, 'package.json')}` });
  assert.deepEqual(chooseBase('127.0.0.1:5000/node:24', { cwd }), { ref: '127.0.0.1:5000/node:24', from: '--base' });
  assert.throws(() => chooseBase('Not A Ref', { cwd }), /--base: Not A Ref is not an image reference/);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'p', kfn: { base: 24 } }));
  assert.throws(() => chooseBase(undefined, { cwd }), /"kfn": \{"base": …\} must be an image reference/);
});
