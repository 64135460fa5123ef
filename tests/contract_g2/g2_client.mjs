#!/usr/bin/env node
/*
 * G2 contract client: drives the REAL code tool of @librechat/agents 3.9.2 (what
 * LibreChat v0.8.6+ uses) against a code-exec service on loopback, authenticating
 * with a JWT minted here the way LibreChat mints it, and prints ONE JSON object.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 \
 *       G2_PRIVATE_KEY_PEM=<PKCS#8 PEM> G2_KID=<kid> G2_ALG=EdDSA|RS256 \
 *       G2_TENANT=<tenant_id> G2_USER_ID=<user id> node g2_client.mjs
 *
 * Facts read from the installed package (dist/esm/tools/CodeExecutor.mjs and
 * ToolNode.mjs; sources under src/tools/ in the same tarball):
 *  - createCodeExecutionTool(params): no API key any more. Auth is
 *    params.authHeaders, a header map or a (sync or async) function returning
 *    one, resolved before EVERY request; a throwing function becomes
 *    'Code execution is not authorized...' without a request. No X-API-Key.
 *  - Base URL: params.baseUrl ?? env LIBRECHAT_CODE_BASEURL ?? the hosted API,
 *    read when the tool is CREATED (3.1.x read it at import). dotenv still runs
 *    at import (reads ./.env).
 *  - HTTP client: `node-fetch`, imported but NOT declared: pinned here.
 *  - POST {base}/exec headers: Content-Type: application/json,
 *    User-Agent: LibreChat/1.0, ...authHeaders, and X-CodeAPI-Expected-Profile
 *    only when params.executionProfile is set.
 *  - Body: {lang, code, ...toolArgs, ...params minus authHeaders/baseUrl/
 *    executionProfile/runtimeSessionHint/statefulSessions}, so user_id, files
 *    and session_id when the host gives them. ToolNode's _injected_files replace
 *    files; each ref is {id, resource_id, name, storage_session_id, kind
 *    ('user'|'agent'|'skill'), version (skill only)}. runtime_session_hint only
 *    with statefulSessions. The /files/{session} fallback of 3.1.x is GONE.
 *  - Non-2xx: throws CodeApiRequestError('Execution error:\n\n' + message),
 *    the message chosen by status from a body read of at most 64 KiB:
 *    429 + {error:'rate_limited', retry_after_seconds} -> 'Retry after N
 *    seconds'; 401/403 -> 'Code execution is not authorized...'; 400/422 ->
 *    'The code execution request was rejected...'; else 'temporarily
 *    unavailable'. A body {code|error: <capability code>} wins over all of them.
 *  - Reply read: stdout, stderr, files, session_id, artifact_delivery,
 *    deleted_files, runtime_session_id/runtime_status. Content: 'stdout:\n..'
 *    or the "Empty" line, 'stderr:\n..', then, if any file is NOT
 *    inherited:true, 'Generated files:\nSession files: N persisted file(s)...'.
 *    Artifact {session_id, files} (files only when non-empty).
 *  - Downloads: the package downloads nothing. LibreChat does, per output file:
 *    GET {base}/download/{storage_session_id}/{id}?kind=user&id=<user id>
 *    with User-Agent and the same auth headers (api/server/services/Files/Code/crud.js).
 *  - The token is LibreChat's own (librechat.mjs).
 */
import { randomBytes } from 'node:crypto';
import { LANGUAGE_PROGRAMS, agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import { mint as mintFor } from './librechat.mjs';

const fail = failer('g2_client');
process.on('unhandledRejection', fail);

const BASEURL = process.env.LIBRECHAT_CODE_BASEURL;
const KEY_PEM = process.env.G2_PRIVATE_KEY_PEM;
const KID = process.env.G2_KID;
const ALG = process.env.G2_ALG || 'EdDSA';
const TENANT = process.env.G2_TENANT;
const USER_ID = process.env.G2_USER_ID || '64f0c0ffee0000000000abcd';
if (!BASEURL || !KEY_PEM || !KID || !TENANT) {
  fail(new Error('LIBRECHAT_CODE_BASEURL, G2_PRIVATE_KEY_PEM, G2_KID and G2_TENANT are required'));
}
const watchdog = setTimeout(() => fail(new Error('timed out')), 90000);

keepTrafficLocal();

/** A code API token with LibreChat's header and claims (librechat.mjs). */
const mint = ({ tenant = TENANT, ttl = 300 } = {}) =>
  mintFor({ pem: KEY_PEM, kid: KID, alg: ALG, tenant, user: USER_ID, ttl });
const authHeaders = async () => ({ Authorization: `Bearer ${mint()}` });

const agents = await importIsolated(() => import('@librechat/agents'), 'g2-client-').catch(fail);
const { createCodeExecutionTool, Constants } = agents;
const TOOL_NAME = Constants.EXECUTE_CODE;
const pkgVersion = agentsVersion(import.meta.url);

const tokenStdout = `G2TOKEN_${randomBytes(6).toString('hex')}`;
const tokenFile = `G2FILE_${randomBytes(6).toString('hex')}`;

let callSeq = 0;
/** Invoke like ToolNode does: a ToolCall, so we get content AND artifact. */
async function invoke(tool, args, extra = {}) {
  const call = { type: 'tool_call', id: `call_g2_${++callSeq}`, name: TOOL_NAME, args, ...extra };
  try {
    const msg = await tool.invoke(call);
    return { threw: false, error: null, status: msg.status ?? null, content: msg.content, artifact: msg.artifact ?? null };
  } catch (e) {
    return { threw: true, error: String(e?.message ?? e), content: null, artifact: null };
  }
}

/** LibreChat's download of one generated file (crud.js getCodeOutputDownloadStream). */
async function download(artifact, file) {
  const session = file.storage_session_id ?? artifact.session_id;
  const query = new URLSearchParams({ kind: 'user', id: USER_ID });
  const response = await fetch(`${BASEURL}/download/${session}/${file.id}?${query}`, {
    headers: { 'User-Agent': 'LibreChat/1.0', ...(await authHeaders()) },
  });
  return {
    status: response.status,
    body: await response.text(),
    content_disposition: response.headers.get('content-disposition'),
  };
}

/** The refs LibreChat primes a later turn with (CodeEnvFile, kind 'user'). */
const refsFrom = (artifact) => (artifact?.files ?? []).map((f) => ({
  id: f.id, resource_id: f.resource_id ?? f.id, name: f.name,
  storage_session_id: f.storage_session_id ?? artifact.session_id, kind: 'user',
}));

const readCode = "print(open('/mnt/data/out.txt').read())";

try {
  const tool1 = createCodeExecutionTool({ user_id: USER_ID, authHeaders });
  const first = await invoke(tool1, {
    lang: 'py',
    code: `print(${JSON.stringify(tokenStdout)})\nwith open('/mnt/data/out.txt', 'w') as f:\n    f.write(${JSON.stringify(tokenFile)})\n`,
  });
  const downloaded = await Promise.all((first.artifact?.files ?? []).map((f) => download(first.artifact, f)));
  const refs = refsFrom(first.artifact);

  // A later turn: a new tool primed with the first run's file.
  const tool2 = createCodeExecutionTool({ user_id: USER_ID, files: refs, authHeaders });
  const second = { files_passed: refs, ...(await invoke(tool2, { lang: 'py', code: readCode })) };

  // The same turn: ToolNode injects the session and its files into the ToolCall.
  const injected = await invoke(tool1, { lang: 'py', code: readCode }, {
    session_id: first.artifact?.session_id, _injected_files: refs,
  });

  // A token for another tenant cannot reach the first run's file.
  const otherTenant = await invoke(
    createCodeExecutionTool({ user_id: USER_ID, files: refs, authHeaders: { Authorization: `Bearer ${mint({ tenant: 'another-tenant' })}` } }),
    { lang: 'py', code: readCode },
  );

  // An expired token: the service's 401, as the client words it.
  const expired = await invoke(
    createCodeExecutionTool({ user_id: USER_ID, authHeaders: { Authorization: `Bearer ${mint({ ttl: -600 })}` } }),
    { lang: 'py', code: "print('should not run')" },
  );

  // Each language once, a new session each (no files), as the model writes them.
  const languages = {};
  for (const [lang, code] of Object.entries(LANGUAGE_PROGRAMS)) {
    languages[lang] = await invoke(tool1, { lang, code });
  }

  clearTimeout(watchdog);
  process.stdout.write(JSON.stringify({
    client: { package: '@librechat/agents', version: pkgVersion, tool_name: TOOL_NAME },
    tokens: { stdout: tokenStdout, file: tokenFile },
    first, downloaded, second, injected, other_tenant: otherTenant, expired, languages,
  }) + '\n');
} catch (e) {
  fail(e);
}
