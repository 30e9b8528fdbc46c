// Pushing kfn's images to an OCI registry (the distribution API: blobs, then the manifest), from
// the image tarballs kfn builds (`docker save` layout, written by go-containerregistry): each
// layer and the config uploaded unless the registry has it, then an OCI manifest by tag. It
// answers the manifest's digest, by which kfn deploys. Credentials come from the Docker config
// (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`: `auths`, `credHelpers`,
// `credsStore`), as every registry client reads them; plain HTTP for a registry on loopback or
// a private address (as go-containerregistry decides), HTTPS elsewhere.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, createReadStream, openSync, readFileSync, readSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';

/** One file in a tar archive: where its bytes are. */
interface TarEntry {
  name: string;
  offset: number;
  size: number;
}

/** The files of a tar archive (ustar, as Go's archive/tar writes it), without reading their contents. */
export function tarEntries(path: string): TarEntry[] {
  const fd = openSync(path, 'r');
  try {
    const entries: TarEntry[] = [];
    const header = Buffer.alloc(512);
    let offset = 0;
    let longName: string | undefined;
    for (;;) {
      if (readSync(fd, header, 0, 512, offset) < 512 || header.every((b) => b === 0)) break;
      const field = (start: number, length: number) => header.subarray(start, start + length).toString('utf8').replace(/\0.*$/s, '');
      const size = parseInt(field(124, 12).trim() || '0', 8);
      const type = String.fromCharCode(header[156]!);
      const prefix = field(345, 155);
      let name = longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
      longName = undefined;
      const data = offset + 512;
      if (type === 'L') {
        // GNU long name: the next entry's name is this entry's data.
        const buf = Buffer.alloc(size);
        readSync(fd, buf, 0, size, data);
        longName = buf.toString('utf8').replace(/\0.*$/s, '');
      } else if (type === '0' || type === '\0') {
        entries.push({ name, offset: data, size });
      }
      name = '';
      offset = data + Math.ceil(size / 512) * 512;
    }
    return entries;
  } finally {
    closeSync(fd);
  }
}

interface Blob {
  digest: string;
  size: number;
  mediaType: string;
  /** A fresh stream of its bytes (each upload attempt reads again). */
  open(): Readable;
}

export const sha256 = (data: Uint8Array) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** The SHA-256 (hex) of `size` bytes of `path` from `offset`, read 1 MiB at a time. */
function hashRange(path: string, offset: number, size: number): string {
  const hash = createHash('sha256');
  const chunk = Buffer.alloc(Math.min(size, 2 ** 20));
  const fd = openSync(path, 'r');
  try {
    for (let done = 0; done < size; ) {
      const n = readSync(fd, chunk, 0, Math.min(chunk.length, size - done), offset + done);
      if (n === 0) throw new Error(`${path} ends before its entry does (at byte ${offset + done})`);
      hash.update(chunk.subarray(0, n));
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

/** The config and layers of an image tarball, and the OCI manifest that names them. */
export function imageFromTarball(path: string): { config: Blob; layers: Blob[]; manifest: Buffer } {
  const entries = new Map(tarEntries(path).map((e) => [e.name, e]));
  const read = (e: TarEntry) => {
    const fd = openSync(path, 'r');
    try {
      const buf = Buffer.alloc(e.size);
      readSync(fd, buf, 0, e.size, e.offset);
      return buf;
    } finally {
      closeSync(fd);
    }
  };
  const manifestEntry = entries.get('manifest.json');
  if (!manifestEntry) throw new Error(`${path} is not an image tarball (it has no manifest.json)`);
  const [saved] = JSON.parse(read(manifestEntry).toString()) as { Config: string; Layers: string[] }[];
  if (!saved) throw new Error(`${path}: manifest.json names no image`);
  const entry = (name: string) => {
    const e = entries.get(name);
    if (!e) throw new Error(`${path}: manifest.json names ${name}, which is not in the archive`);
    return e;
  };
  const configEntry = entry(saved.Config);
  const configBytes = read(configEntry);
  const config: Blob = { digest: sha256(configBytes), size: configBytes.length, mediaType: 'application/vnd.oci.image.config.v1+json', open: () => createReadStream(path, { start: configEntry.offset, end: configEntry.offset + configEntry.size - 1 }) };
  const layers = saved.Layers.map((name): Blob => {
    const e = entry(name);
    // The digest of what is uploaded: hashed here rather than trusted from the file's name.
    const digest = `sha256:${hashRange(path, e.offset, e.size)}`;
    return { digest, size: e.size, mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', open: () => createReadStream(path, { start: e.offset, end: e.offset + e.size - 1 }) };
  });
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: config.mediaType, digest: config.digest, size: config.size },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size })),
    }),
  );
  return { config, layers, manifest };
}

export interface RegistryCredentials {
  username: string;
  password: string;
}

/**
 * Credentials for `registry` (host[:port]) from the Docker config: a credential helper named for
 * it (`credHelpers`), else `auths` (its `auth`, base64 user:password), else the default store
 * (`credsStore`). undefined when the config has none for it.
 */
export function dockerCredentials(registry: string, env: NodeJS.ProcessEnv = process.env): RegistryCredentials | undefined {
  const file = join(env.DOCKER_CONFIG ?? join(homedir(), '.docker'), 'config.json');
  let config: { auths?: Record<string, { auth?: string; username?: string; password?: string }>; credHelpers?: Record<string, string>; credsStore?: string };
  try {
    config = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`cannot read the Docker config ${file}: ${(err as Error).message}`);
  }
  const helper = (name: string) => {
    const out = spawnSync(`docker-credential-${name}`, ['get'], { input: keys[0], encoding: 'utf8' });
    if (out.error) throw new Error(`the Docker config names the credential helper docker-credential-${name}, which cannot run: ${out.error.message}`);
    if (out.status !== 0) return undefined; // "credentials not found"
    const { Username, Secret } = JSON.parse(out.stdout) as { Username: string; Secret: string };
    return { username: Username, password: Secret };
  };
  // `docker login` files Docker Hub's credentials under its old index address.
  const keys = registry === 'docker.io' || registry === 'index.docker.io' ? ['https://index.docker.io/v1/', 'index.docker.io', 'docker.io'] : [registry, `https://${registry}`, `http://${registry}`];
  const helperName = keys.map((k) => config.credHelpers?.[k]).find(Boolean);
  if (helperName) return helper(helperName);
  const entry = keys.map((k) => config.auths?.[k]).find(Boolean);
  if (entry?.auth) {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) throw new Error(`the Docker config's auth for ${registry} is not base64 of user:password`);
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  if (entry?.username !== undefined) return { username: entry.username, password: entry.password ?? '' };
  if (config.credsStore) return helper(config.credsStore);
  return undefined;
}

/** Plain HTTP for a registry on loopback or a private (RFC 1918) address, as go-containerregistry decides; HTTPS elsewhere. */
export function registryScheme(registry: string): 'http' | 'https' {
  const host = registry.replace(/:\d+$/, '');
  if (host === 'localhost' || host.endsWith('.localhost') || /^127\./.test(host)) return 'http';
  const parts = host.split('.').map(Number);
  if (parts.length === 4 && parts.every((p) => Number.isInteger(p) && p >= 0 && p <= 255)) {
    const [a, b] = parts as [number, number];
    if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) return 'http';
  }
  return 'https';
}

interface Answer {
  status: number;
  headers: IncomingMessage['headers'];
  body: string;
}

type Body = () => Readable | Buffer | Promise<Readable | Buffer>;

/** Where a registry's API answers: Docker Hub's images are named docker.io, its API is registry-1.docker.io. */
export const registryApiHost = (registry: string) => (registry === 'docker.io' || registry === 'index.docker.io' ? 'registry-1.docker.io' : registry);

/** The manifest kinds a client accepts, images and multi-platform indexes, OCI and Docker alike. */
const manifestAccept = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');

/** A blob as the registry takes it: its digest and size, and a fresh stream of its bytes for each attempt. */
export interface BlobSource {
  digest: string;
  size: number;
  open: Body;
}

/**
 * The distribution API for one repository: blobs (look, fetch, mount, upload) and manifests.
 * A 401 is answered once with the credentials the challenge asks for; `pullFrom` names other
 * repositories of the same registry whose blobs it may mount (their pull scope joins the token).
 */
export class RegistryClient {
  private authorization: string | undefined;
  private readonly base: string;
  readonly registry: string;
  readonly repository: string;
  private readonly credentials: RegistryCredentials | undefined;
  private readonly pullFrom: string[];

  constructor(registry: string, repository: string, credentials: RegistryCredentials | undefined, options: { pullFrom?: string[] } = {}) {
    this.registry = registry;
    this.repository = repository;
    this.credentials = credentials;
    this.pullFrom = options.pullFrom ?? [];
    this.base = `${registryScheme(registry)}://${registryApiHost(registry)}`;
  }

  /** A request whose answer is read whole (a registry's error or a manifest: small). */
  async send(method: string, pathOrUrl: string, options: { headers?: Record<string, string | number>; body?: Body } = {}): Promise<Answer> {
    const res = await this.open(method, pathOrUrl, options);
    return { status: res.statusCode ?? 0, headers: res.headers, body: await readText(res) };
  }

  /**
   * A request whose answer is left as a stream (a blob), after a 401 is answered and redirects
   * are followed (Docker Hub, GHCR, ECR send blobs from a storage service: no credentials go there).
   */
  async open(method: string, pathOrUrl: string, options: { headers?: Record<string, string | number>; body?: Body } = {}): Promise<IncomingMessage> {
    const first = await this.once(method, new URL(pathOrUrl, this.base), options);
    let res = first;
    if (first.statusCode === 401) {
      await readText(first);
      await this.authenticate(String(first.headers['www-authenticate'] ?? ''));
      res = await this.once(method, new URL(pathOrUrl, this.base), options);
      if (res.statusCode === 401) {
        await readText(res);
        throw new Error(`${this.registry} refused the credentials of ${this.credentials?.username ?? '(none)'} for ${this.repository} (HTTP 401): check them (docker login ${this.registry}, or the auths entry in the Docker config)`);
      }
    }
    for (let hops = 0; (method === 'GET' || method === 'HEAD') && [301, 302, 303, 307, 308].includes(res.statusCode ?? 0) && res.headers.location; hops++) {
      if (hops === 5) throw new Error(`${method} ${pathOrUrl} at ${this.registry}: more than 5 redirects`);
      await readText(res);
      const next = new URL(res.headers.location!, this.base);
      res = await this.once(method, next, { ...options, anonymous: next.origin !== new URL(this.base).origin });
    }
    return res;
  }

  private async once(method: string, url: URL, options: { headers?: Record<string, string | number>; body?: Body; anonymous?: boolean }): Promise<IncomingMessage> {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const body = await options.body?.();
    return new Promise((resolve, reject) => {
      const req = send(url, { method, headers: { ...options.headers, ...(this.authorization && !options.anonymous ? { authorization: this.authorization } : {}) }, timeout: 300_000 }, resolve);
      req.on('timeout', () => req.destroy(new Error(`${method} ${url.href}: no answer in 300 s`)));
      req.on('error', (err) => reject(new Error(`${method} ${url.href}: ${err.message}`)));
      if (!body) req.end();
      else if (Buffer.isBuffer(body)) req.end(body);
      else body.on('error', (err) => req.destroy(err)).pipe(req);
    });
  }

  /** Basic, or a bearer token from the challenge's realm (the token flow of Docker Hub, GHCR, ECR, Harbor …). */
  private async authenticate(challenge: string): Promise<void> {
    const who = this.credentials ? ` as ${this.credentials.username}` : ' (no credentials for it in the Docker config)';
    if (/^basic/i.test(challenge)) {
      if (!this.credentials) throw new Error(`${this.registry} asks for a user and password${who}: log in (docker login ${this.registry}, or an auths entry in ~/.docker/config.json)`);
      this.authorization = `Basic ${Buffer.from(`${this.credentials.username}:${this.credentials.password}`).toString('base64')}`;
      return;
    }
    if (!/^bearer/i.test(challenge)) throw new Error(`${this.registry} refused the request (401) with no challenge kfn knows: ${challenge || '(none)'}`);
    const params = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!.toLowerCase(), m[2]!]));
    if (!params.realm) throw new Error(`${this.registry}'s bearer challenge names no realm: ${challenge}`);
    const url = new URL(params.realm);
    if (params.service) url.searchParams.set('service', params.service);
    // Push where the registry allows it; a pull-only token for a public base is enough to read it.
    url.searchParams.append('scope', `repository:${this.repository}:pull,push`);
    for (const from of this.pullFrom) url.searchParams.append('scope', `repository:${from}:pull`);
    const headers: Record<string, string> = this.credentials ? { authorization: `Basic ${Buffer.from(`${this.credentials.username}:${this.credentials.password}`).toString('base64')}` } : {};
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
    if (!res.ok) throw new Error(`${this.registry}'s token service (${url.origin}) refused${who}: HTTP ${res.status}`);
    const token = (await res.json()) as { token?: string; access_token?: string };
    const value = token.token ?? token.access_token;
    if (!value) throw new Error(`${this.registry}'s token service answered no token`);
    this.authorization = `Bearer ${value}`;
  }

  /** Whether the repository has the blob. */
  async hasBlob(digest: string): Promise<boolean> {
    const head = await this.send('HEAD', `/v2/${this.repository}/blobs/${digest}`);
    return head.status === 200;
  }

  /**
   * Puts a blob in the repository unless it is there: mounted from `mountFrom` (another
   * repository of this registry: nothing is sent), else uploaded from `blob.open()`.
   */
  async putBlob(blob: BlobSource, options: { mountFrom?: string } = {}): Promise<'present' | 'mounted' | 'uploaded'> {
    if (await this.hasBlob(blob.digest)) return 'present';
    const query = options.mountFrom ? `?mount=${encodeURIComponent(blob.digest)}&from=${encodeURIComponent(options.mountFrom)}` : '';
    const start = await this.send('POST', `/v2/${this.repository}/blobs/uploads/${query}`, { headers: { 'content-length': 0 } });
    if (start.status === 201 && options.mountFrom) return 'mounted';
    // 202: an upload session (a registry that cannot mount starts one instead, as the spec says).
    const location = start.headers.location;
    if (start.status !== 202 || !location) throw new Error(`${this.registry} did not start an upload to ${this.repository} (HTTP ${start.status}): ${start.body.slice(0, 300)}`);
    const url = new URL(location, this.base);
    url.searchParams.set('digest', blob.digest);
    const put = await this.send('PUT', url.href, { headers: { 'content-type': 'application/octet-stream', 'content-length': blob.size }, body: blob.open });
    if (put.status !== 201) throw new Error(`${this.registry} refused blob ${blob.digest} of ${this.repository} (HTTP ${put.status}): ${put.body.slice(0, 300)}`);
    return 'uploaded';
  }

  /** A blob's bytes as a stream; `what` names it in the error (e.g. the base image's reference). */
  async blobStream(digest: string, what: string): Promise<IncomingMessage> {
    const res = await this.open('GET', `/v2/${this.repository}/blobs/${digest}`);
    if (res.statusCode !== 200) throw new Error(`cannot read blob ${digest} of ${what} from ${this.registry} (HTTP ${res.statusCode}): ${(await readText(res)).slice(0, 300)}`);
    return res;
  }

  /** A small blob (an image config), read whole and checked against its digest. */
  async blob(digest: string, what: string): Promise<Buffer> {
    const res = await this.blobStream(digest, what);
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    if (sha256(bytes) !== digest) throw new Error(`${this.registry} answered blob ${digest} of ${what} with other bytes (${sha256(bytes)})`);
    return bytes;
  }

  /** A manifest or index by tag or digest: its media type, bytes and digest (a 404 or 401 says so, naming `what`). */
  async manifest(reference: string, what: string): Promise<{ mediaType: string; bytes: Buffer; digest: string }> {
    const res = await this.open('GET', `/v2/${this.repository}/manifests/${reference}`, { headers: { accept: manifestAccept } });
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    if (res.statusCode !== 200) {
      const hint = res.statusCode === 404 ? ': no such image there (check the name and tag)' : res.statusCode === 401 || res.statusCode === 403 ? ': not allowed (docker login, or the auths entry in the Docker config)' : '';
      throw new Error(`cannot pull the manifest of ${what} from ${this.registry} (HTTP ${res.statusCode})${hint}: ${bytes.toString('utf8').slice(0, 300)}`);
    }
    const digest = sha256(bytes);
    if (reference.startsWith('sha256:') && digest !== reference) throw new Error(`${this.registry} answered ${what} with a manifest of digest ${digest}, not ${reference}`);
    const mediaType = String(res.headers['content-type'] ?? '').split(';')[0]!.trim() || ((JSON.parse(bytes.toString()) as { mediaType?: string }).mediaType ?? '');
    return { mediaType, bytes, digest };
  }

  /** Puts a manifest by tag; answers its digest (checked against what the registry says it stored). */
  async putManifest(tag: string, bytes: Buffer, mediaType: string): Promise<string> {
    const put = await this.send('PUT', `/v2/${this.repository}/manifests/${tag}`, { headers: { 'content-type': mediaType, 'content-length': bytes.length }, body: () => bytes });
    if (put.status !== 201) throw new Error(`${this.registry} refused the manifest of ${this.repository}:${tag} (HTTP ${put.status}): ${put.body.slice(0, 300)}`);
    const digest = sha256(bytes);
    const answered = put.headers['docker-content-digest'];
    if (answered && answered !== digest) throw new Error(`${this.registry} stored the manifest of ${this.repository}:${tag} as ${String(answered)}, not ${digest}`);
    return digest;
  }
}

/** An answer's text, kept to 64 KiB (a registry's error; the rest is drained). */
async function readText(res: IncomingMessage): Promise<string> {
  let body = '';
  res.setEncoding('utf8');
  for await (const chunk of res) if (body.length < 65_536) body += chunk as string;
  return body;
}

/** registry/repository:tag → its parts. */
export function parseReference(ref: string): { registry: string; repository: string; tag: string } {
  const slash = ref.indexOf('/');
  if (slash < 0) throw new Error(`image reference ${ref} names no registry (expected host[:port]/repository:tag)`);
  const registry = ref.slice(0, slash);
  const rest = ref.slice(slash + 1);
  const colon = rest.lastIndexOf(':');
  if (colon < 0 || rest.includes('@')) throw new Error(`image reference ${ref} has no tag (expected host[:port]/repository:tag)`);
  return { registry, repository: rest.slice(0, colon), tag: rest.slice(colon + 1) };
}

export interface Pushed {
  /** registry/repository@sha256:… — what a pod should run. */
  ref: string;
  digest: string;
  /** Bytes uploaded (blobs the registry already had are not). */
  uploaded: number;
  seconds: number;
}

/**
 * Pushes the image tarball at `path` as `ref` (registry/repository:tag): the blobs the
 * registry lacks, then the manifest. Credentials: `credentials`, else the Docker config's.
 */
export async function pushImage(path: string, ref: string, options: { credentials?: RegistryCredentials; log?: (line: string) => void } = {}): Promise<Pushed> {
  const started = performance.now();
  const { registry, repository, tag } = parseReference(ref);
  const client = new RegistryClient(registry, repository, options.credentials ?? dockerCredentials(registry));
  const image = imageFromTarball(path);
  let uploaded = 0;
  for (const blob of [...image.layers, image.config]) {
    if ((await client.putBlob(blob)) === 'uploaded') uploaded += blob.size;
  }
  const digest = await client.putManifest(tag, image.manifest, 'application/vnd.oci.image.manifest.v1+json');
  const seconds = (performance.now() - started) / 1000;
  options.log?.(`Pushed ${registry}/${repository}:${tag} (${digest.slice(0, 19)}…, ${(uploaded / 2 ** 20).toFixed(1)} MiB uploaded in ${seconds.toFixed(1)} s)`);
  return { ref: `${registry}/${repository}@${digest}`, digest, uploaded, seconds };
}
