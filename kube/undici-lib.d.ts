// Types of the modules of undici that kube/undici.ts loads by their paths (undici declares types
// for its package entry only): its Agent, the request of its API (called on a dispatcher), and the
// global dispatcher that a request without one goes through.
declare module 'undici/lib/dispatcher/agent.js' {
  import { Agent } from 'undici';
  export default Agent;
}

declare module 'undici/lib/api/api-request.js' {
  import type { Dispatcher } from 'undici';
  const request: (this: Dispatcher, options: Dispatcher.RequestOptions) => Promise<Dispatcher.ResponseData>;
  export default request;
}

declare module 'undici/lib/global.js' {
  import type { Dispatcher } from 'undici';
  export function getGlobalDispatcher(): Dispatcher;
}
