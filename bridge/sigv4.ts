// AWS Signature Version 4 for deliveries to a Lambda Function URL with AuthType AWS_IAM: the
// request is signed for service `lambda` in the function's region, with credentials from the AWS
// default chain (environment, web identity — IRSA's AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN —,
// shared config, container or instance metadata), refreshed by the chain before they expire.
import { fromNodeProviderChain } from '@aws-sdk/credential-providers';
import { Hash } from '@smithy/hash-node';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentityProvider } from '@smithy/types';

export interface SigV4Options {
  region: string;
  service: string;
  /** Default: the AWS SDK's Node default chain. */
  credentials?: AwsCredentialIdentityProvider;
}

export type RequestSigner = (url: string, headers: Record<string, string>, body: string) => Promise<Record<string, string>>;

const sha256 = Hash.bind(null, 'sha256');

export function sigv4Signer(options: SigV4Options): RequestSigner {
  const signer = new SignatureV4({ credentials: options.credentials ?? fromNodeProviderChain(), region: options.region, service: options.service, sha256 });
  return async (url, headers, body) => {
    const u = new URL(url);
    const query: Record<string, string> = {};
    for (const [k, v] of u.searchParams) query[k] = v;
    const signed = await signer.sign({
      method: 'POST',
      protocol: u.protocol,
      hostname: u.hostname,
      port: u.port ? Number(u.port) : undefined,
      path: u.pathname,
      query,
      // Lambda checks the payload hash too: sign the body's SHA-256, sent as x-amz-content-sha256.
      headers: { ...headers, host: u.host, 'x-amz-content-sha256': await bodyHash(body) },
      body,
    });
    return signed.headers;
  };
}

async function bodyHash(body: string): Promise<string> {
  const h = new sha256();
  h.update(body);
  return Buffer.from(await h.digest()).toString('hex');
}

/**
 * Checks a received request's SigV4 signature the way the AWS side does: the headers it names as
 * signed, signed again with the same key and date, must give the same Authorization.
 * Returns undefined when it matches, else why not.
 */
export async function verifySigV4(
  request: { method: string; url: string; headers: Record<string, string>; body: string },
  options: { region: string; service: string; accessKeyId: string; secretAccessKey: string; sessionToken?: string },
): Promise<string | undefined> {
  const auth = request.headers.authorization ?? '';
  const m = auth.match(/^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/);
  if (!m) return 'no SigV4 Authorization header';
  const [, keyId, , region, service, signedHeaders] = m;
  if (keyId !== options.accessKeyId) return `unknown access key ${keyId}`;
  if (region !== options.region || service !== options.service) return `signed for ${service} in ${region}, not ${options.service} in ${options.region}`;
  const amzDate = request.headers['x-amz-date'];
  if (!amzDate) return 'no x-amz-date header';
  const date = new Date(`${amzDate.slice(0, 4)}-${amzDate.slice(4, 6)}-${amzDate.slice(6, 8)}T${amzDate.slice(9, 11)}:${amzDate.slice(11, 13)}:${amzDate.slice(13, 15)}Z`);
  if (Math.abs(Date.now() - date.getTime()) > 5 * 60_000) return `signed at ${amzDate}, more than 5 minutes from now`;
  const names = signedHeaders!.split(';');
  const headers: Record<string, string> = {};
  for (const n of names) if (request.headers[n] !== undefined) headers[n] = request.headers[n]!;
  if (request.headers['x-amz-content-sha256'] !== (await bodyHash(request.body))) return 'the body does not match x-amz-content-sha256';
  const u = new URL(request.url, `http://${request.headers.host}`);
  const query: Record<string, string> = {};
  for (const [k, v] of u.searchParams) query[k] = v;
  const signer = new SignatureV4({ credentials: { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey, sessionToken: options.sessionToken }, region: options.region, service: options.service, sha256 });
  const expected = await signer.sign(
    { method: request.method, protocol: 'http:', hostname: u.hostname, port: u.port ? Number(u.port) : undefined, path: u.pathname, query, headers, body: request.body },
    { signingDate: date, unsignableHeaders: new Set(Object.keys(request.headers).filter((h) => !names.includes(h))) },
  );
  return expected.headers.authorization === auth ? undefined : 'the signature does not match';
}
