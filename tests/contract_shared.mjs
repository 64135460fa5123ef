/*
 * What both contract clients (contract/g1_client.mjs, contract_g2/g2_client.mjs) need
 * before they drive the real npm package: one way to fail, traffic kept on the service
 * under test, and the package imported where it finds no stray .env.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Print the error under the client's name and exit 1: the pytest side shows stderr. */
export function failer(name) {
  return (err) => {
    process.stderr.write(`${name}: ${err?.stack ?? err}\n`);
    process.exit(1);
  };
}

/** No proxy, no tracing exporters: every byte goes to the service under test. */
export function keepTrafficLocal() {
  for (const k of Object.keys(process.env)) {
    if (/^(PROXY|HTTPS?_PROXY|LANGFUSE_|LANGCHAIN_|LANGSMITH_)/i.test(k)) delete process.env[k];
  }
}

/**
 * The package reads ./.env (dotenv) and the base URL at import time: run `load` (the
 * caller's own `import()`, so the package resolves from the caller's node_modules) from
 * an empty directory, after the environment is final.
 */
export async function importIsolated(load, prefix) {
  const cwd = process.cwd();
  const emptyDir = mkdtempSync(join(tmpdir(), prefix));
  process.chdir(emptyDir);
  try {
    return await load();
  } finally {
    process.chdir(cwd);
    rmSync(emptyDir, { recursive: true, force: true });
  }
}

/** The installed version of @librechat/agents beside the calling script. */
export function agentsVersion(scriptUrl) {
  const manifest = new URL('./node_modules/@librechat/agents/package.json', scriptUrl);
  return JSON.parse(readFileSync(manifest, 'utf8')).version;
}
