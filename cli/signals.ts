// How the `kfn` CLI ends on a stop signal — SIGINT (Ctrl-C), SIGTERM (a supervisor, a test),
// SIGHUP (a closed terminal): every child process it started ends with it.
//
// A command that runs until stopped (dev, serve, bridge, demo) waits for `stopRequested()` and
// stops what it started; a child process it starts is `ownChild(spawn(…))`. cli/kfn.ts calls
// `handleStopSignals()` once, before any command runs, so that no stop signal takes Node's
// default action (ending the process at once, its children left running on their own):
// - a signal no command is waiting for ends the CLI after its owned children are sent SIGTERM,
//   by that same signal, as the default action would have;
// - the same signal again within a second of one a command took is the same request twice —
//   a terminal's Ctrl-C reaches both the `kfn` shim and a CLI it spawned, and the shim passes
//   it on too — and is ignored, so it cannot cut the command's cleanup short;
// - a later one, while the command is still stopping, ends the CLI as above (a second Ctrl-C).
import type { ChildProcess } from 'node:child_process';
import { systemClock, type Clock } from '../core/clock.ts';

export const stopSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
type StopSignal = (typeof stopSignals)[number];

/** Children this CLI started that must not outlive it; each leaves the set when it exits. */
const owned = new Set<ChildProcess>();
/** Commands waiting to be told to stop. */
const waiting: ((signal: StopSignal) => void)[] = [];
/** When a command last took a stop signal, and which (a repeat of it within `sameRequestMs` is the same request). */
let taken: { signal: StopSignal; at: number } | undefined;
const sameRequestMs = 1000;

/** Marks `child` as the CLI's: it is sent SIGTERM when the CLI exits or is ended by a signal. */
export function ownChild<C extends ChildProcess>(child: C): C {
  owned.add(child);
  child.once('exit', () => owned.delete(child));
  return child;
}

/** Resolves with the first stop signal the CLI gets from now on. */
export function stopRequested(): Promise<StopSignal> {
  return new Promise((resolve) => waiting.push(resolve));
}

function endOwnedChildren(): void {
  for (const child of owned) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
}

/** Installs the CLI's handling of stop signals (see the top of this file). Call once. */
export function handleStopSignals(clock: Clock = systemClock): void {
  // On any exit — a command returning, throwing, or calling process.exit — no owned child stays.
  process.on('exit', endOwnedChildren);
  const onSignal = (signal: StopSignal) => {
    const now = clock.now();
    // Listeners of the command's own (process.once in a command not yet using stopRequested) count as waiting.
    const othersListen = process.listenerCount(signal) > 1;
    if (waiting.length || othersListen) {
      taken = { signal, at: now };
      for (const resolve of waiting.splice(0)) resolve(signal);
      return;
    }
    if (taken?.signal === signal && now - taken.at < sameRequestMs) return;
    endOwnedChildren();
    for (const s of stopSignals) process.removeAllListeners(s);
    process.kill(process.pid, signal);
  };
  for (const signal of stopSignals) process.on(signal, onSignal);
}
