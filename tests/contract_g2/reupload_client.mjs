#!/usr/bin/env node
/*
 * LibreChat (v0.8.6+) priming a file it uploaded before a run, as its server does: the
 * file's freshness asked of the code API (`/sessions/{sid}/objects/{id}`, 5 s, process.js),
 * the file uploaded again when that is not a 200 younger than 23 hours (its session ended,
 * or the host holding it is gone), then the REAL code tool of @librechat/agents 3.9.2 run
 * with the ref. Two phases, so that a test can stop a host in between:
 *
 *   env LIBRECHAT_CODE_BASEURL=... CODE_API_KEY=... node reupload_client.mjs upload
 *   env ... node reupload_client.mjs run '<the ref the upload phase printed>'
 *
 * Prints ONE JSON object. The key travels as a header of LibreChat's auth hook.
 */
import { agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import { get, upload } from './librechat.mjs';

const fail = failer('reupload_client');
process.on('unhandledRejection', fail);
const BASE = process.env.LIBRECHAT_CODE_BASEURL;
const KEY = process.env.CODE_API_KEY;
if (!BASE || !KEY) fail(new Error('LIBRECHAT_CODE_BASEURL and CODE_API_KEY are required'));
setTimeout(() => fail(new Error('timed out')), 60000).unref();
keepTrafficLocal();

const USER = '64f0c0ffee00000000000a11';
const headers = { 'X-API-Key': KEY };
const DAY = 23 * 3600 * 1000;

async function uploadOnce() {
  const sent = await upload(BASE, headers, { kind: 'user', id: USER }, [['sales.csv', Buffer.from('region,n\nnorth,3\n')]],
    { user: USER });
  if (sent.status !== 200) fail(new Error(`upload answered ${sent.status}: ${JSON.stringify(sent.body)}`));
  const [file] = sent.body.files;
  return { id: file.fileId, name: file.filename, storage_session_id: sent.body.storage_session_id, kind: 'user',
           resource_id: USER };
}

async function fresh(ref) {
  const seen = await get(BASE, `/sessions/${ref.storage_session_id}/objects/${ref.id}`, headers,
    { kind: 'user', id: USER }).catch(() => null);
  const modified = seen?.status === 200 ? Date.parse(seen.json?.lastModified) : NaN;
  return { status: seen?.status ?? null, fresh: Date.now() - modified < DAY };
}

const phase = process.argv[2];
if (phase === 'upload') {
  process.stdout.write(JSON.stringify({ ref: await uploadOnce() }));
} else {
  let ref = JSON.parse(process.argv[3]);
  const checked = await fresh(ref);
  const uploadedAgain = !checked.fresh;
  if (uploadedAgain) ref = await uploadOnce();
  const agents = await importIsolated(() => import('@librechat/agents'), 'reupload-client-').catch(fail);
  const { createCodeExecutionTool, Constants } = agents;
  const tool = createCodeExecutionTool({ user_id: USER, files: [ref], authHeaders: async () => headers });
  const call = { type: 'tool_call', id: 'call_reupload_1', name: Constants.EXECUTE_CODE,
                 args: { lang: 'py', code: "print(open('sales.csv').read().splitlines()[1])" } };
  const message = await tool.invoke(call);
  process.stdout.write(JSON.stringify({
    client: { version: agentsVersion(import.meta.url) }, checked, uploaded_again: uploadedAgain, ref,
    content: message.content, artifact: message.artifact ?? null,
  }));
}
