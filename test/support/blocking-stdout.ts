// Loaded into every test file's process by `npm test` (test/support/node-test.ts): its stdout, a
// pipe to the runner carrying the file's test verdicts, is written synchronously. With
// --test-force-exit a file's process exits as soon as its tests end; verdicts still queued on an
// asynchronous pipe were lost with it, and the run reported fewer tests than ran, still passing
// (Node's issue 64833; about one in twenty of 2000 quick tests here).
(process.stdout as unknown as { _handle?: { setBlocking?: (blocking: boolean) => void } })._handle?.setBlocking?.(true);
