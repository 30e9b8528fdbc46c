// A real browser for the dev UI's tests: Debian's Chromium driven by playwright-core (no
// browser download: the registry-free way). `npm test` installs the package on first need.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

export const chromiumPath = '/usr/bin/chromium';

/** Installs Debian's chromium when it is missing (as root), saying so; throws with what to do otherwise. */
export function ensureChromium(log: (line: string) => void): void {
  if (existsSync(chromiumPath)) return;
  if (process.getuid?.() !== 0) throw new Error(`the dev UI's browser tests need Chromium at ${chromiumPath}: install it with \`sudo apt-get install chromium\``);
  const install = () => spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'chromium'], { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  log('installing Debian\'s chromium for the dev UI\'s browser test (apt-get install chromium, about a minute)');
  let out = install();
  if (out.status !== 0) {
    log('refreshing the package lists (apt-get update) and trying again');
    spawnSync('apt-get', ['update'], { stdio: ['ignore', 'inherit', 'inherit'] });
    out = install();
  }
  if (out.status !== 0 || !existsSync(chromiumPath)) throw new Error(`apt-get install chromium failed (status ${out.status}); the dev UI's browser test cannot run without it`);
}

/** Headless Chromium, as these machines allow it (no sandbox, no GPU, no network of its own). */
export function launchChromium(): Promise<Browser> {
  if (!existsSync(chromiumPath)) throw new Error(`Chromium is not installed at ${chromiumPath} (npm test installs it; by hand: apt-get install chromium)`);
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
}
