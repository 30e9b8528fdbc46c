import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sigv4Signer, verifySigV4 } from './sigv4.ts';

const key = { accessKeyId: 'AKIDKFNUNIT', secretAccessKey: 'unit-secret' };
const url = 'https://abc123.lambda-url.eu-west-1.on.aws/';

async function signed(body: string, credentials = key, region = 'eu-west-1') {
  const sign = sigv4Signer({ region, service: 'lambda', credentials: async () => credentials });
  const headers = await sign(url, { 'content-type': 'application/cloudevents+json', 'kfn-signature': 'x' }, body);
  return { method: 'POST', url: '/', headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])), body };
}

test('a request signed with the key verifies', async () => {
  const req = await signed('{"a":1}');
  assert.match(req.headers.authorization!, /^AWS4-HMAC-SHA256 Credential=AKIDKFNUNIT\/\d{8}\/eu-west-1\/lambda\/aws4_request, SignedHeaders=[^,]*host[^,]*, Signature=[0-9a-f]{64}$/);
  assert.equal(await verifySigV4(req, { ...key, region: 'eu-west-1', service: 'lambda' }), undefined);
});

test('another secret, another body, another region or no signature: refused, saying why', async () => {
  const opts = { ...key, region: 'eu-west-1', service: 'lambda' };
  assert.equal(await verifySigV4(await signed('{"a":1}', { ...key, secretAccessKey: 'wrong' }), opts), 'the signature does not match');
  const tampered = await signed('{"a":1}');
  assert.equal(await verifySigV4({ ...tampered, body: '{"a":2}' }, opts), 'the body does not match x-amz-content-sha256');
  assert.match((await verifySigV4(await signed('{}', key, 'us-east-1'), opts))!, /signed for lambda in us-east-1, not lambda in eu-west-1/);
  assert.equal(await verifySigV4({ method: 'POST', url: '/', headers: {}, body: '' }, opts), 'no SigV4 Authorization header');
  assert.match((await verifySigV4(await signed('{}', { accessKeyId: 'OTHER', secretAccessKey: 'x' }), opts))!, /unknown access key OTHER/);
});
