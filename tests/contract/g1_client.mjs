#!/usr/bin/env node
/*
 * G1 contract client: drives the REAL code tool of @librechat/agents 3.1.63
 * (the newest 3.1.x that still authenticates with X-API-Key) against a
 * code-exec service on loopback, and prints ONE JSON object on stdout.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 \
 *       LIBRECHAT_CODE_API_KEY=<key> node g1_client.mjs
 *   optional: G1_USER_ID (default 64f0c0ffee0000000000abcd),
 *             G1_TIMEOUT_MS (default 60000, whole-script watchdog)
 *
 * Facts read from the installed package (node_modules/@librechat/agents,
 * file dist/esm/tools/CodeExecutor.mjs, plus dist/esm/tools/ToolNode.mjs):
 *  - Export: createCodeExecutionTool(params). API key is
 *    params.LIBRECHAT_CODE_API_KEY ?? params.apiKey ?? env LIBRECHAT_CODE_API_KEY;
 *    throws 'No API key provided for code execution tool.' when none.
 *  - Base URL: env LIBRECHAT_CODE_BASEURL ?? 'https://api.librechat.ai/v1', read
 *    ONCE at module load (EXEC_ENDPOINT = `${base}/exec`), so it must be set
 *    before the import. The module also runs dotenv config() (reads ./.env).
 *    If env PROXY is set, requests go through HttpsProxyAgent(PROXY).
 *  - HTTP client: `node-fetch` (imported but NOT declared in its package.json;
 *    pinned here explicitly).
 *  - POST {base}/exec headers: Content-Type: application/json,
 *    User-Agent: LibreChat/1.0, X-API-Key: <key>. Nothing else (no
 *    Authorization, no User-Id).
 *  - Body: { lang, code, ...restOfToolArgs (args), ...params }. Every
 *    factory param is spread in, so the body carries LIBRECHAT_CODE_API_KEY
 *    (the secret itself), user_id, and files. There is NO top-level session_id
 *    in the body, ever: sessions travel only inside files[].session_id.
 *  - Files from an earlier run reach the body three ways, highest priority first:
 *     1. config.toolCall._injected_files (ToolNode, same agent run): refs
 *        {session_id: file.session_id ?? artifact.session_id, id, name} of
 *        files tracked from earlier artifacts; replaces params.files.
 *     2. params.files given to the factory (LibreChat across turns:
 *        handleTools -> primeCodeFiles -> createCodeExecutionTool({user_id,
 *        files, ...authValues}); each ref is {id, session_id, name}, split from
 *        the stored fileIdentifier "session_id/id").
 *     3. config.toolCall.session_id with no tracked files: GET
 *        {base}/files/{session_id}?detail=full (User-Agent + X-API-Key) and
 *        maps each entry to {session_id, id: name.split('/')[1].split('.')[0],
 *        name: metadata['original-filename']}. NOTE it strips the extension
 *        from the id ("out.txt" -> "out") and needs metadata; a failure is
 *        swallowed with console.warn and the exec is sent without files.
 *  - Non-2xx reply: throws Error('Execution error:\n\nHTTP error! status: N');
 *    the reply body is never read. Network errors are wrapped the same way.
 *  - Reply read: result.stdout, result.stderr, result.files, result.session_id
 *    (nothing else). Content string, then .trim():
 *      stdout ? "stdout:\n<stdout>\n" : "stdout: Empty. Ensure you're writing output explicitly.\n"
 *      + (stderr ? "stderr:\n<stderr>\n" : "")
 *      + if files non-empty: "Generated files:\n" + per file
 *        "- /mnt/data/<file.name> | " + ("Image is already displayed to the user"
 *        for /\.(jpg|jpeg|png|gif|webp)$/i, else "File is already downloaded by
 *        the user"), joined by ", " (<=3 files) or ",\n" (>3), then
 *        "\n\nNote: Files from previous executions are automatically available and can be modified."
 *  - responseFormat 'content_and_artifact'; artifact = {session_id, files}
 *    when files non-empty, else {session_id}. Invoked with a ToolCall
 *    ({type:'tool_call', id, name, args}) it returns a ToolMessage carrying
 *    content + artifact; invoked with bare args it returns the string only.
 *  - Downloads: 3.1.63 does NOT download generated files. It only reports them
 *    (text + artifact). The HOST (LibreChat's processCodeOutput) fetches
 *    GET {base}/download/{session_id}/{id} for each artifact file afterwards.
 */
import { randomBytes } from 'node:crypto';
import { LANGUAGE_PROGRAMS, agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';

const fail = failer('g1_client');
process.on('unhandledRejection', fail);

const BASEURL = process.env.LIBRECHAT_CODE_BASEURL;
const API_KEY = process.env.LIBRECHAT_CODE_API_KEY;
const USER_ID = process.env.G1_USER_ID || '64f0c0ffee0000000000abcd';
const TIMEOUT_MS = Number(process.env.G1_TIMEOUT_MS || 60000);
if (!BASEURL || !API_KEY) {
  fail(new Error('LIBRECHAT_CODE_BASEURL and LIBRECHAT_CODE_API_KEY are required'));
}
const watchdog = setTimeout(() => fail(new Error(`timed out after ${TIMEOUT_MS} ms`)), TIMEOUT_MS);

keepTrafficLocal();
const agents = await importIsolated(() => import('@librechat/agents'), 'g1-client-').catch(fail);
const { createCodeExecutionTool, Constants } = agents;
const TOOL_NAME = Constants.EXECUTE_CODE; // 'execute_code'
const pkgVersion = agentsVersion(import.meta.url);

const tokenStdout = `G1TOKEN_${randomBytes(6).toString('hex')}`;
const tokenFile = `G1FILE_${randomBytes(6).toString('hex')}`;

let callSeq = 0;
/** Invoke like ToolNode does: a ToolCall, so we get content AND artifact. */
async function invoke(tool, args, extra = {}) {
  const call = { type: 'tool_call', id: `call_g1_${++callSeq}`, name: TOOL_NAME, args, ...extra };
  const msg = await tool.invoke(call);
  return {
    tool_call_id: call.id,
    status: msg.status ?? null,
    content: msg.content,
    artifact: msg.artifact ?? null,
  };
}
/** Same, but an exception is a recorded outcome, not a script failure. */
async function invokeCaught(tool, args, extra) {
  try {
    return { threw: false, error: null, ...(await invoke(tool, args, extra)) };
  } catch (e) {
    return { threw: true, error: String(e?.message ?? e), content: null, artifact: null };
  }
}
/** LibreChat's file refs for a previous artifact: {id, session_id, name}. */
const refsFrom = (artifact) =>
  (artifact?.files ?? []).map((f) => ({ id: f.id, session_id: artifact.session_id, name: f.name }));

const readCode = "print(open('/mnt/data/out.txt').read())";

try {
  // (a) first run: print a token and write out.txt into the working dir.
  const tool1 = createCodeExecutionTool({ LIBRECHAT_CODE_API_KEY: API_KEY, user_id: USER_ID });
  const first = await invoke(tool1, {
    lang: 'py',
    code: `print(${JSON.stringify(tokenStdout)})\nwith open('/mnt/data/out.txt', 'w') as f:\n    f.write(${JSON.stringify(tokenFile)})\n`,
  });
  const refs = refsFrom(first.artifact);

  // (c) second tool instance, the way LibreChat primes files across turns.
  const tool2 = createCodeExecutionTool({ LIBRECHAT_CODE_API_KEY: API_KEY, user_id: USER_ID, files: refs });
  const second = { files_passed: refs, ...(await invoke(tool2, { lang: 'py', code: readCode })) };

  // Same-run path: ToolNode injects session_id + _injected_files into the ToolCall.
  const injected = {
    files_passed: refs,
    ...(await invoke(tool1, { lang: 'py', code: readCode }, {
      session_id: first.artifact?.session_id,
      _injected_files: refs,
    })),
  };

  // Informational: ToolNode with a session but no tracked files -> the client's
  // GET /files/{sid}?detail=full fallback. Recorded, never fatal.
  const sessionOnly = await invokeCaught(tool1, { lang: 'py', code: readCode }, {
    session_id: first.artifact?.session_id,
  });

  // Wrong key: the client must throw 'Execution error: ... status: 401'.
  const badTool = createCodeExecutionTool({ LIBRECHAT_CODE_API_KEY: `${API_KEY}-wrong`, user_id: USER_ID });
  const badKey = await invokeCaught(badTool, { lang: 'py', code: "print('should not run')" });

  // Each language once, a new session each (no files), as the model writes them.
  const languages = {};
  for (const [lang, code] of Object.entries(LANGUAGE_PROGRAMS)) {
    languages[lang] = await invoke(tool1, { lang, code });
  }

  clearTimeout(watchdog);
  process.stdout.write(JSON.stringify({
    client: { package: '@librechat/agents', version: pkgVersion, tool_name: TOOL_NAME },
    base_url: BASEURL,
    user_id: USER_ID,
    tokens: { stdout: tokenStdout, file: tokenFile },
    first,
    second,
    injected,
    session_only: sessionOnly,
    bad_key: badKey,
    languages,
  }) + '\n');
} catch (e) {
  fail(e);
}
