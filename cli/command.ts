// The shape every `kfn` command has: a name, one line of summary, a usage text shown by
// `--help`, and a run function. Parsing errors print the usage and exit with status 2.
import { parseArgs, type ParseArgsConfig } from 'node:util';

export interface Command {
  name: string;
  summary: string;
  usage: string;
  run(argv: string[]): Promise<number>;
}

/** A user error: printed without a stack trace, with the command's exit status. */
export class UsageError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message);
    this.exitCode = exitCode;
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

export function wantsHelp(argv: string[]): boolean {
  return argv.includes('--help') || argv.includes('-h');
}

/** parseArgs with strict checking, turning its errors into UsageErrors that name the command. */
export function parseCommandArgs<O extends Options>(command: string, argv: string[], options: O, allowPositionals = false) {
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true });
  } catch (err) {
    throw new UsageError(`kfn ${command}: ${(err as Error).message}\nRun \`kfn ${command} --help\` for usage.`);
  }
}

export function parsePort(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError(`${flag} must be a port number between 1 and 65535, not "${value}"`);
  return port;
}
