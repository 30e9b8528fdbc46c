// The shape every `kfn` command has: a name, a usage text shown by `--help`, the flags its
// parser accepts, and a run function. Its one line of summary is written in cli/commands.ts, so
// that `kfn --help` lists the commands without loading them. Parsing errors print the usage
// and exit with status 2.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { closest } from './suggest.ts';

export interface Command {
  name: string;
  usage: string;
  /**
   * The flags `run` parses (the object it gives parseCommandArgs): its usage names each of
   * them and no other (cli/help.test.ts). Empty for a command that only has subcommands.
   */
  options: Options;
  /** A command of commands (`kfn cluster up`): each subcommand's usage and flags, by name. */
  subcommands?: Record<string, { usage: string; options: Options }>;
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

/**
 * The error for a command `kfn <command> <name>` (or `kfn <name>`) does not have: the one it most
 * likely meant, else the usage. `command` is how it is invoked (`kfn`, `kfn cluster`).
 */
export function unknownCommand(command: string, name: string, known: readonly string[], usage: string): UsageError {
  const meant = closest(name, known);
  return new UsageError(meant ? `${command}: unknown command "${name}" — did you mean "${meant}"?\nRun '${command} --help' for ${command === 'kfn' ? 'the commands' : 'its commands'}.` : `${command}: unknown command "${name}"\n\n${usage}`);
}

export type Options = NonNullable<ParseArgsConfig['options']>;

export function wantsHelp(argv: string[]): boolean {
  return argv.includes('--help') || argv.includes('-h');
}

/**
 * parseArgs with strict checking, turning its errors into UsageErrors that name the command; an
 * unknown flag is named with the accepted one it most likely meant.
 */
export function parseCommandArgs<O extends Options>(command: string, argv: string[], options: O, allowPositionals = false) {
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true });
  } catch (err) {
    const unknown = (err as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? unknownFlag(argv, options) : undefined;
    const meant = unknown?.startsWith('--') ? closest(unknown.slice(2), Object.keys(options)) : undefined;
    const problem = unknown ? `unknown flag ${unknown}${meant ? ` — did you mean --${meant}?` : ''}` : (err as Error).message;
    throw new UsageError(`kfn ${command}: ${problem}\nRun \`kfn ${command} --help\` for usage.`);
  }
}

/** The first flag in `argv` that `options` does not accept (`--name` or `-x`, without its value). */
function unknownFlag(argv: string[], options: Options): string | undefined {
  const shorts = new Map(Object.entries(options).flatMap(([name, o]) => (o.short ? [[o.short, name] as const] : [])));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return undefined;
    if (arg.startsWith('--')) {
      const name = arg.slice(2).split('=')[0]!;
      if (!options[name]) return `--${name}`;
      if (options[name].type === 'string' && !arg.includes('=')) i++; // its value follows
    } else if (arg.startsWith('-') && arg.length > 1) {
      // -abc is -a -b -c; a string flag among them takes the rest as its value
      for (let at = 1; at < arg.length; at++) {
        const name = shorts.get(arg[at]!);
        if (!name) return `-${arg[at]}`;
        if (options[name]!.type === 'string') {
          if (at === arg.length - 1) i++; // its value follows
          break;
        }
      }
    }
  }
  return undefined;
}

export function parsePort(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError(`${flag} must be a port number between 1 and 65535, not "${value}"`);
  return port;
}

/** kubectl's flags that choose the cluster (read by cli/cluster-choice.ts), for a command's flags. */
export const clusterFlags = { kubeconfig: { type: 'string' }, context: { type: 'string' } } as const;
/** Use kfn's own local cluster, starting it if it is not running. */
export const localClusterFlag = { 'local-cluster': { type: 'boolean' } } as const;

/** The help lines of clusterFlags (and localClusterFlag), the flag column `width` wide. */
export function clusterFlagsUsage(width: number, localCluster = false): string {
  const lines = [
    ['--kubeconfig F', "the kubeconfig (default: $KUBECONFIG's files, merged, else ~/.kube/config, else in-cluster)"],
    ['--context C', "the kubeconfig's context (default: its current-context)"],
    ...(localCluster ? [['--local-cluster', "use kfn's own local cluster, starting it if it is not running"]] : []),
  ];
  return lines.map(([flag, what]) => `  ${flag!.padEnd(width)} ${what}`).join('\n');
}
