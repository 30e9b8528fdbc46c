import assert from 'node:assert/strict';
import { test } from 'node:test';
import { transportLines, type TransportRound } from './transport.ts';

const round = (protocol: TransportRound['protocol'], concurrency: number, bridgeMs: number, functionMs: number, seconds = 1): TransportRound => ({ protocol, concurrency, deliveries: 1000, seconds, bridgeMs, functionMs });

test("the hop's table gives each protocol the mean of its rounds, every column over the same rounds, and h2c's ratio to HTTP/1.1", () => {
  const lines = transportLines([
    round('http1', 1, 0.4, 0.6, 1),
    round('h2c', 1, 0.9, 0.7, 2),
    round('h2c', 1, 0.7, 0.5, 2),
    round('http1', 1, 0.6, 0.4, 0.5),
    round('http1', 8, 0.3, 0.2),
    round('h2c', 8, 0.3, 0.2),
  ]);
  const cells = (line: string) => line.trim().split(/\s+/);
  assert.equal(lines.length, 5, 'a header, then two protocols at each of two concurrencies');
  // HTTP/1.1 at ×1: bridge (0.4 + 0.6) / 2, function (0.6 + 0.4) / 2, deliveries/s (1000 + 2000) / 2.
  assert.deepEqual(cells(lines[1]!), ['http1', '×1', '1500', '0.500', '0.500', '1.000', '1.00×']);
  assert.deepEqual(cells(lines[2]!), ['h2c', '×1', '500', '0.800', '0.600', '1.400', '1.40×']);
  assert.deepEqual(cells(lines[3]!), ['http1', '×8', '1000', '0.300', '0.200', '0.500', '1.00×']);
  assert.deepEqual(cells(lines[4]!), ['h2c', '×8', '1000', '0.300', '0.200', '0.500', '1.00×']);
});
