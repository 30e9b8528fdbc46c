// Node's HTTP module, loaded as CommonJS. An ES import of node:http builds its module namespace,
// and reading every export for it runs the WebSocket getter, which loads Node's own fetch
// (undici): about 20 ms of a process's start and 13 MB of its resident memory (Node 24), for
// code that nothing in kfn calls. Every module of kfn that runs in a function or the bridge
// takes node:http from here; types may still be imported (`import type` is erased).
import { createRequire } from 'node:module';

export const nodeHttp = createRequire(import.meta.url)('node:http') as typeof import('node:http');
