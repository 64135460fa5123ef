#!/usr/bin/env node
/*
 * G1 LibreChat's own file calls (up to v0.8.5, X-API-Key: api/server/services/Files/Code/
 * crud.js and process.js) around the REAL 3.1.63 code tool, shaped as that source makes them:
 *  - upload: axios + form-data, the field `entity_id` first (a file of an agent's), then the
 *    part `file`; headers User-Agent LibreChat/1.0, User-Id and X-API-Key; the reply counts
 *    only with message "success", and the file's identifier is `${session_id}/${fileId}`;
 *  - the next turn's tool is primed with the ref {id, session_id, name} split from it;
 *  - getSessionInfo: GET /files/{session_id}?detail=summary, the file found by its name;
 *  - processCodeOutput: GET /download/{session_id}/{id} of each generated file, whole.
 * Prints ONE JSON object (downloads in base64).
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 LIBRECHAT_CODE_API_KEY=<key> node files_client.mjs
 */
import { agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import axios from 'axios';
import FormData from 'form-data';

const fail = failer('files_client');
process.on('unhandledRejection', fail);
const BASE = process.env.LIBRECHAT_CODE_BASEURL;
const API_KEY = process.env.LIBRECHAT_CODE_API_KEY;
if (!BASE || !API_KEY) fail(new Error('LIBRECHAT_CODE_BASEURL and LIBRECHAT_CODE_API_KEY are required'));
const USER_ID = '64f0c0ffee0000000000abcd';
const watchdog = setTimeout(() => fail(new Error('timed out')), 120000);
keepTrafficLocal();

const { createCodeExecutionTool } = await importIsolated(() => import('@librechat/agents'), 'files-client-').catch(fail);
const headers = { 'User-Agent': 'LibreChat/1.0', 'X-API-Key': API_KEY };
const CSV = 'a,b\n1,2\n';

/** crud.js uploadCodeEnvFile. */
async function uploadCodeEnvFile(filename, text, entityId) {
  const form = new FormData();
  form.append('entity_id', entityId);
  form.append('file', Buffer.from(text), filename);
  const response = await axios.post(`${BASE}/upload`, form, {
    headers: { ...form.getHeaders(), 'Content-Type': 'multipart/form-data', 'User-Id': USER_ID, ...headers },
    maxContentLength: 150 * 1024 * 1024,
    maxBodyLength: 150 * 1024 * 1024,
  });
  if (response.data.message !== 'success') throw new Error(`upload answered ${JSON.stringify(response.data)}`);
  return `${response.data.session_id}/${response.data.files[0].fileId}`;
}

try {
  const identifier = await uploadCodeEnvFile('data.csv', CSV, 'asst_1');
  const [sessionId, fileId] = identifier.split('/');
  const refs = [{ id: fileId, session_id: sessionId, name: 'data.csv' }];

  const tool = createCodeExecutionTool({ LIBRECHAT_CODE_API_KEY: API_KEY, user_id: USER_ID, files: refs });
  const code = "data = open('/mnt/data/data.csv').read()\n"
    + "open('/mnt/data/out.png', 'wb').write(bytes(range(256)) * 4)\nprint(data)";
  const message = await tool.invoke({ type: 'tool_call', id: 'call_files_1', name: tool.name, args: { lang: 'py', code } });
  const artifact = message.artifact ?? {};

  // process.js getSessionInfo: is the uploaded file still there, and since when?
  const summary = await axios.get(`${BASE}/files/${sessionId}`, { params: { detail: 'summary' }, headers });
  const listed = summary.data.find((f) => f.name.startsWith(`${sessionId}/${fileId}`));

  // processCodeOutput: every generated file, downloaded whole.
  const downloads = {};
  for (const file of artifact.files ?? []) {
    const got = await axios.get(`${BASE}/download/${artifact.session_id}/${file.id}`, {
      headers, responseType: 'arraybuffer',
    });
    downloads[file.name] = {
      status: got.status,
      base64: Buffer.from(got.data).toString('base64'),
      contentType: got.headers['content-type'],
      disposition: got.headers['content-disposition'],
    };
  }
  clearTimeout(watchdog);
  process.stdout.write(JSON.stringify({
    client: { version: agentsVersion(import.meta.url) },
    identifier,
    run: { content: message.content, artifact },
    listed: listed ?? null,
    downloads,
  }));
} catch (err) {
  fail(err);
}
