#!/usr/bin/env node
/*
 * The set-up of docs/librechat.md, end to end: LibreChat's .env lines (as
 * `python -m codeexec.keys` prints them) in this process's environment, read the way
 * LibreChat's server reads them (packages/api/src/auth/codeapi.ts: a token only when
 * CODEAPI_AUTH_PROVIDER is librechat-jwt or both; the PEM from
 * CODEAPI_JWT_PRIVATE_KEY_BASE64, a literal "\n" made a newline; CODEAPI_JWT_KID,
 * CODEAPI_JWT_ALGORITHM; tenant `legacy` in a single-tenant LibreChat) and the REAL
 * @librechat/agents code tool against LIBRECHAT_CODE_BASEURL. Prints ONE JSON object:
 *   first, reused: two runs with the SAME token (LibreChat caches one up to 30 s);
 *   unsigned: a run with no auth header (CODEAPI_AUTH_PROVIDER unset).
 */
import { agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import { mint } from './librechat.mjs';

const fail = failer('env_client');
process.on('unhandledRejection', fail);
const env = process.env;
const provider = env.CODEAPI_AUTH_PROVIDER;
if (provider !== 'librechat-jwt' && provider !== 'both') fail(new Error('CODEAPI_AUTH_PROVIDER is not librechat-jwt'));
const pem = Buffer.from(env.CODEAPI_JWT_PRIVATE_KEY_BASE64, 'base64').toString('utf8').replace(/\\n/g, '\n').trim();
const token = mint({
  pem, kid: env.CODEAPI_JWT_KID ?? 'lc-codeapi-2026-05', alg: env.CODEAPI_JWT_ALGORITHM || 'EdDSA',
  tenant: env.CODEAPI_JWT_SINGLE_TENANT_ID || 'legacy', user: '64f0c0ffee0000000000abcd',
});
const watchdog = setTimeout(() => fail(new Error('timed out')), 60000);
keepTrafficLocal();

const { createCodeExecutionTool, Constants } = await importIsolated(() => import('@librechat/agents'), 'env-client-');
let seq = 0;
async function run(authHeaders, code) {
  const tool = createCodeExecutionTool({ user_id: '64f0c0ffee0000000000abcd', ...(authHeaders ? { authHeaders } : {}) });
  const call = { type: 'tool_call', id: `call_env_${++seq}`, name: Constants.EXECUTE_CODE, args: { lang: 'py', code } };
  try {
    const msg = await tool.invoke(call);
    return { threw: false, content: msg.content, session_id: msg.artifact?.session_id ?? null };
  } catch (e) {
    return { threw: true, error: String(e?.message ?? e) };
  }
}

const headers = { Authorization: `Bearer ${token}` };
const result = {
  version: agentsVersion(import.meta.url),
  first: await run(headers, "print('first', 6 * 7)"),
  reused: await run(headers, "print('reused', 6 * 7)"),
  unsigned: await run(null, "print('should not run')"),
};
clearTimeout(watchdog);
process.stdout.write(JSON.stringify(result));
