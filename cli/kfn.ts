#!/usr/bin/env node
// The `kfn` command. In the repository: `npm run kfn -- <command> [options]`.
// Running this module runs the CLI: the bin shim imports it in its own process.
import { commands } from './commands.ts';
import { unknownCommand, UsageError } from './command.ts';
import { handleStopSignals } from './signals.ts';
import { loadYamlParser } from '../kube/kubeconfig.ts';

/** `kfn --help`: how to run kfn here (cli/invocation.ts, loaded only now: the bridge's image runs this file without kfn's files beside it). */
async function topUsage(): Promise<string> {
  const width = Math.max(...commands.map((c) => c.name.length));
  const { kfnCommand } = await import('./invocation.ts');
  return [
    `Usage: ${kfnCommand('<command> [options]')}`,
    '',
    'kfn runs Kubernetes operators as stateless reconcile functions.',
    '',
    'Commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    "Run 'kfn <command> --help' for a command's usage.",
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === 'version') {
    const { kfnVersion } = await import('../cluster/paths.ts');
    const { contractVersion } = await import('../core/event.ts');
    console.log(`kfn ${kfnVersion} (event contract v${contractVersion}; bridge image kfn.local/bridge:${kfnVersion})`);
    return 0;
  }
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(await topUsage());
    return name ? 0 : 2;
  }
  const entry = commands.find((c) => c.name === name);
  if (!entry) {
    throw unknownCommand('kfn', name, commands.map((c) => c.name), await topUsage());
  }
  // Any command may read a kubeconfig, and the bundled CLI (the bridge's image) cannot load the
  // YAML parser synchronously when one first needs it (kube/kubeconfig.ts).
  const [command] = await Promise.all([entry.load(), loadYamlParser()]);
  return command.run(rest);
}

handleStopSignals();
try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  if (err instanceof UsageError) {
    console.error(err.message);
    process.exitCode = err.exitCode;
  } else {
    console.error(`kfn: ${(err as Error).message}`);
    if (process.env.KFN_DEBUG) console.error((err as Error).stack);
    process.exitCode = 1;
  }
}
