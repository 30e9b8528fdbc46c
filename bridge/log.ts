// What the bridge's parts write their structured log lines to: pino's shape (an object of
// fields, then the message), so the process can hand them pino and a test a silent stand-in.
export interface Logger {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}
