// Starting and stopping the control plane's processes. Every process is recorded by PID with
// the binary it runs, and a PID is treated as ours only while /proc says it still runs that
// binary, so a stop never signals an unrelated process that reused the number.
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ProcessRecord {
  name: string;
  pid: number;
  command: string;
  args: string[];
  log: string;
}

/** Starts `command` in its own process group, detached from ours, output appended to `log`. */
export function startProcess(name: string, command: string, args: string[], log: string): ProcessRecord {
  const fd = openSync(log, 'a');
  try {
    const child = spawn(command, args, { detached: true, stdio: ['ignore', fd, fd] });
    if (child.pid === undefined) throw new Error(`could not start ${name} (${command})`);
    child.on('error', () => {
      /* reported through isRunning() and the log */
    });
    child.unref();
    return { name, pid: child.pid, command, args, log };
  } finally {
    closeSync(fd);
  }
}

/** True while `record.pid` is alive and still runs `record.command` (zombies count as gone). */
export function isRunning(record: Pick<ProcessRecord, 'pid' | 'command'>): boolean {
  try {
    const cmdline = readFileSync(`/proc/${record.pid}/cmdline`, 'utf8');
    return cmdline.split('\0')[0] === record.command;
  } catch {
    if (process.platform === 'linux') return false;
  }
  try {
    process.kill(record.pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Resident memory of a process in bytes, or undefined when it cannot be read. */
export function residentBytes(pid: number): number | undefined {
  try {
    const match = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
    return match?.[1] ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Stops one recorded process: SIGTERM, then SIGKILL if it is still there after `graceMs`.
 * Returns false if it was not running (already gone, or the PID now belongs to another program).
 */
export async function stopProcess(record: ProcessRecord, graceMs = 10_000): Promise<boolean> {
  if (!isRunning(record)) return false;
  // startProcess made the process the leader of its own group: signal the group, so that
  // anything it started goes with it.
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-record.pid, sig);
    } catch {
      try {
        process.kill(record.pid, sig);
      } catch {
        /* exited between the check and the signal */
      }
    }
  };
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isRunning(record)) {
    if (Date.now() > deadline) {
      signal('SIGKILL');
      await sleep(200);
      break;
    }
    await sleep(100);
  }
  return true;
}

/** The last `lines` lines of a log file, for error messages. */
export function logTail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}
