// The registry client's own parts: reading an image tarball (the docker-save layout
// go-containerregistry writes) into the blobs and the OCI manifest it pushes, credentials from
// a Docker config (auths and a credential helper), and which registries it speaks plain HTTP to.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { dockerCredentials, imageFromTarball, parseReference, registryScheme, tarEntries } from './push.ts';

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

test('an image tarball becomes its config and layer blobs and an OCI manifest naming them by digest', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-push-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Entrypoint: ['/app'] } }));
  const layer = gzipSync(Buffer.from('not really a tar, but bytes with a digest'));
  const layerName = `${createHash('sha256').update(layer).digest('hex')}.tar.gz`;
  const archive = join(dir, 'content');
  mkdirSync(archive);
  writeFileSync(join(archive, sha(config)), config);
  writeFileSync(join(archive, layerName), layer);
  writeFileSync(join(archive, 'manifest.json'), JSON.stringify([{ Config: sha(config), RepoTags: ['kfn.local/fn-x:0.1.0'], Layers: [layerName] }]));
  // A name longer than 100 bytes takes ustar's prefix or GNU's long-name entry: both are read.
  const long = `${'d'.repeat(120)}.txt`;
  writeFileSync(join(archive, long), 'x');
  const tarball = join(dir, 'image.tar');
  const made = spawnSync('tar', ['-cf', tarball, '-C', archive, 'manifest.json', sha(config), layerName, long]);
  assert.equal(made.status, 0, String(made.stderr));
  assert.deepEqual(tarEntries(tarball).map((e) => [e.name, e.size]), [['manifest.json', statSync(join(archive, 'manifest.json')).size], [sha(config), config.length], [layerName, layer.length], [long, 1]]);
  const image = imageFromTarball(tarball);
  assert.equal(image.config.digest, sha(config));
  assert.deepEqual(image.layers.map((l) => [l.digest, l.size, l.mediaType]), [[sha(layer), layer.length, 'application/vnd.oci.image.layer.v1.tar+gzip']]);
  const manifest = JSON.parse(image.manifest.toString()) as { mediaType: string; config: { digest: string; size: number }; layers: { digest: string }[] };
  assert.equal(manifest.mediaType, 'application/vnd.oci.image.manifest.v1+json');
  assert.deepEqual([manifest.config.digest, manifest.config.size, manifest.layers[0]!.digest], [sha(config), config.length, sha(layer)]);
  assert.throws(() => imageFromTarball(join(archive, 'manifest.json')), /is not an image tarball|names no image|not in the archive/);
});

test('credentials from a Docker config: a credential helper for the registry, else its auths entry; none for others', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-docker-config-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const helper = join(dir, 'docker-credential-test');
  writeFileSync(helper, '#!/bin/sh\nread host\nif [ "$host" = "helped.example.com" ]; then echo \'{"ServerURL":"helped.example.com","Username":"robot","Secret":"s3cret"}\'; else echo "credentials not found" >&2; exit 1; fi\n');
  chmodSync(helper, 0o755);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ auths: { '10.244.0.1:15000': { auth: Buffer.from('kfn:pa:ss').toString('base64') } }, credHelpers: { 'helped.example.com': 'test' } }));
  const env = { DOCKER_CONFIG: dir, PATH: `${dir}:${process.env.PATH}` };
  const saved = process.env.PATH;
  process.env.PATH = env.PATH;
  t.after(() => (process.env.PATH = saved));
  assert.deepEqual(dockerCredentials('10.244.0.1:15000', env), { username: 'kfn', password: 'pa:ss' });
  assert.deepEqual(dockerCredentials('helped.example.com', env), { username: 'robot', password: 's3cret' });
  assert.equal(dockerCredentials('other.example.com', env), undefined);
  assert.equal(dockerCredentials('x', { DOCKER_CONFIG: join(dir, 'absent') }), undefined, 'no Docker config: no credentials');
});

test('plain HTTP for loopback and private addresses only; references need a registry and a tag', () => {
  assert.deepEqual(['127.0.0.1:5000', 'localhost:5000', '10.244.0.1:15000', '192.168.1.9', '172.20.0.1:80', 'registry.example.com', '172.32.0.1', 'ghcr.io'].map(registryScheme), ['http', 'http', 'http', 'http', 'http', 'https', 'https', 'https']);
  assert.deepEqual(parseReference('10.244.0.1:15000/team/fn-myweb:0.1.0'), { registry: '10.244.0.1:15000', repository: 'team/fn-myweb', tag: '0.1.0' });
  assert.throws(() => parseReference('fn-myweb:0.1.0'), /names no registry/);
  assert.throws(() => parseReference('r.example.com/fn-myweb'), /has no tag/);
});
