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

/**
 * One program per language as a model writes them for LibreChat: absolute /mnt/data paths
 * (what the tool description tells it), js/ts expecting Node (require, no Deno), bash
 * printing to both streams. The pytest side holds what each must answer, on every backend.
 */
export const LANGUAGE_PROGRAMS = {
  py: "open('/mnt/data/py.txt', 'w').write('from py')\nprint(open('/mnt/data/py.txt').read())",
  js: "const fs = require('fs');\nfs.writeFileSync('/mnt/data/js.txt', 'from js');\n"
    + "console.log(typeof Deno, typeof require, fs.readFileSync('/mnt/data/js.txt', 'utf8'));",
  ts: "import * as fs from 'fs';\nconst n: number = 6 * 7;\nfs.writeFileSync('/mnt/data/ts.txt', `from ts ${n}`);\n"
    + "console.log(typeof Deno, fs.readFileSync('/mnt/data/ts.txt', 'utf8'));",
  bash: "printf 'one\\ttab\\n'; echo \"args: $#\"; printf 'x\\ny\\n' > /mnt/data/lines.txt\n"
    + "wc -l < /mnt/data/lines.txt; rm /mnt/data/lines.txt; echo warned >&2; pwd; printf 'last line'",
};

/**
 * The agent tools the programmatic clients give the package, made with the package's own
 * `tool` (3.1.63 and 3.9.2 pin different @langchain/core): what ToolNode puts in a ToolCall,
 * the toolMap that runs them and the toolDefs marked callable from code. Each call the
 * package makes is pushed on `called` as [name, city?].
 */
export function agentTools(tool, called) {
  const weatherSchema = { type: 'object', properties: { city: { type: 'string', description: 'City' } }, required: ['city'] };
  const noArgs = { type: 'object', properties: {} };
  const getWeather = tool(async ({ city }) => { called.push(['get_weather', city]); return { city, sky: 'clear' }; }, {
    name: 'get_weather', description: 'The weather in a city', schema: weatherSchema,
  });
  const failingTool = tool(async () => { called.push(['failing-tool']); throw new Error('boom from failing-tool'); }, {
    name: 'failing-tool', description: 'Always fails', schema: noArgs,
  });
  return {
    toolMap: new Map([getWeather, failingTool].map((t) => [t.name, t])),
    toolDefs: [
      { name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema, allowed_callers: ['code_execution'] },
      { name: 'failing-tool', description: 'Always fails', parameters: noArgs, allowed_callers: ['code_execution'] },
    ],
  };
}
