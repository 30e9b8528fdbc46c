// The journal: one JSON line per delivery attempt and its outcome, appended to a file that
// rotates by size (F → F.1 → F.2 …), which `kfn replay` reads. It records references and
// outcomes only; fields that can hold Secret data (`data`, `stringData`) are never written,
// wherever they appear.
import { appendFileSync, existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DeliveryOutcome, Observation } from './contract.ts';

export interface JournalEntry {
  time: string;
  id: string;
  reconciler: string;
  key: string;
  reason: Observation['reason'];
  attempt: number;
  primary: Observation['primary'];
  trigger?: Observation['trigger'];
  observedAt: string;
  sink: string;
  status?: number;
  outcome: DeliveryOutcome['kind'];
  why?: string;
  durationMs: number;
  response?: unknown;
}

export interface JournalOptions {
  /** Rotate when the file passes this size (default 10 MiB). */
  maxBytes?: number;
  /** Rotated files kept (default 5). */
  keep?: number;
}

const secretFields = new Set(['data', 'stringData', 'binaryData']);

/** A deep copy of `value` without any field that could carry Secret data. */
export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (!secretFields.has(k)) out[k] = redact(v);
  return out;
}

export class Journal {
  readonly path: string;
  private readonly maxBytes: number;
  private readonly keep: number;
  private size: number;

  constructor(path: string, options: JournalOptions = {}) {
    this.path = path;
    this.maxBytes = options.maxBytes ?? 10 * 1024 * 1024;
    this.keep = Math.max(1, options.keep ?? 5);
    mkdirSync(dirname(path), { recursive: true });
    this.size = existsSync(path) ? statSync(path).size : 0;
  }

  append(entry: JournalEntry): void {
    const line = `${JSON.stringify(redact(entry))}\n`;
    if (this.size > 0 && this.size + line.length > this.maxBytes) this.rotate();
    // Synchronous appends: one line per call, never interleaved, nothing lost on exit.
    appendFileSync(this.path, line);
    this.size += Buffer.byteLength(line);
  }

  private rotate(): void {
    rmSync(`${this.path}.${this.keep}`, { force: true });
    for (let i = this.keep - 1; i >= 1; i--) {
      if (existsSync(`${this.path}.${i}`)) renameSync(`${this.path}.${i}`, `${this.path}.${i + 1}`);
    }
    renameSync(this.path, `${this.path}.1`);
    this.size = 0;
  }
}
