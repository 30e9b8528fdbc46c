import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crc32, inflateRawSync } from 'node:zlib';
import { zip } from './zip.ts';

/** Reads a zip through its central directory, as unzip and Lambda do. */
function unzip(buf: Buffer): { name: string; data: Buffer; mode: number }[] {
  const end = buf.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(end >= 0, 'an end of central directory record');
  const count = buf.readUInt16LE(end + 10);
  let p = buf.readUInt32LE(end + 16);
  const out = [];
  for (let i = 0; i < count; i++) {
    assert.equal(buf.readUInt32LE(p), 0x02014b50);
    const [method, crc, size, raw, nameLen, extraLen, commentLen] = [buf.readUInt16LE(p + 10), buf.readUInt32LE(p + 16), buf.readUInt32LE(p + 20), buf.readUInt32LE(p + 24), buf.readUInt16LE(p + 28), buf.readUInt16LE(p + 30), buf.readUInt16LE(p + 32)];
    const mode = buf.readUInt32LE(p + 38) >>> 16;
    const local = buf.readUInt32LE(p + 42);
    const name = buf.subarray(p + 46, p + 46 + nameLen).toString('utf8');
    assert.equal(buf.readUInt32LE(local), 0x04034b50);
    const start = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    assert.equal(method, 8);
    const data = inflateRawSync(buf.subarray(start, start + size));
    assert.equal(data.length, raw);
    assert.equal(crc32(data), crc, `${name}: CRC`);
    out.push({ name, data, mode });
    p += 46 + nameLen + extraLen + commentLen;
  }
  return out;
}

test('a deployment package: entries come back byte for byte, with their names and modes', () => {
  const big = Buffer.alloc(300_000);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7919) % 251;
  const entries = [
    { name: 'index.mjs', data: Buffer.from('export const handler = async () => ({ statusCode: 200 });\n') },
    { name: 'lib/data.bin', data: big, mode: 0o755 },
    { name: 'empty.txt', data: Buffer.alloc(0) },
    { name: 'ünïcode.json', data: Buffer.from('{"a":"é"}') },
  ];
  const back = unzip(zip(entries));
  assert.deepEqual(back.map((e) => e.name), entries.map((e) => e.name));
  for (const [i, e] of entries.entries()) {
    assert.ok(back[i]!.data.equals(e.data), e.name);
    assert.equal(back[i]!.mode, 0o100000 | (e.mode ?? 0o644));
  }
});

test('the same input gives the same bytes (reproducible builds)', () => {
  const a = zip([{ name: 'index.mjs', data: Buffer.from('x') }]);
  const b = zip([{ name: 'index.mjs', data: Buffer.from('x') }]);
  assert.ok(a.equals(b));
});
