/*
 * What LibreChat's own server (v0.8.6+) does against the code API besides the agents
 * package's tools, shaped as its source does it:
 *  - its token (packages/api/src/auth/codeapi.ts): header {alg, typ:'JWT', kid}, claims
 *    iss 'librechat', aud 'codeapi', sub <user id>, iat, nbf, exp = iat + 300, jti,
 *    tenant_id, role, principal_source, auth_context_hash; node:crypto's sign();
 *  - uploads (api/server/services/Files/Code/crud.js, packages/api/src/files/code/form.ts):
 *    axios + form-data, fields kind, id, version (skills only), read_only=true (batch
 *    only), then every part named `file`, a nested path travelling as form-data's
 *    `filepath`; a stream body, so chunked with no Content-Length; headers User-Agent,
 *    User-Id and the bearer; maxBodyLength 150 MiB;
 *  - reads (process.js): `${base}/download/${sid}/${id}?kind=user&id=<user>` and
 *    `${base}/sessions/${sid}/objects/${id}?kind=&id=`, the ids put in the URL WITHOUT
 *    encoding; its browser fallback route (routes/files/files.js) takes only ids that
 *    match /^[A-Za-z0-9_-]{21}$/ for both the session and the file.
 */
import { createHash, createPrivateKey, randomUUID, sign } from 'node:crypto';
import { Readable } from 'node:stream';
import axios from 'axios';
import FormData from 'form-data';

const MAX_FILE_SIZE = 150 * 1024 * 1024;
export const isValidID = (str) => /^[A-Za-z0-9_-]{21}$/.test(str);

const b64url = (value) => Buffer.from(value).toString('base64url');

/** A code API token with LibreChat's header and claims. */
export function mint({ pem, kid, alg = 'EdDSA', tenant, user, ttl = 300 }) {
  const key = createPrivateKey(pem);
  const now = Math.floor(Date.now() / 1000);
  const context = { principal_source: 'librechat_jwt', role: 'USER', sub: user, tenant_id: tenant };
  const claims = {
    iss: 'librechat', aud: 'codeapi', sub: user, iat: now, nbf: now, exp: now + ttl,
    jti: randomUUID(), tenant_id: tenant, role: 'USER', principal_source: 'librechat_jwt',
    auth_context_hash: createHash('sha256').update(JSON.stringify(context)).digest('hex'),
  };
  const input = `${b64url(JSON.stringify({ alg, typ: 'JWT', kid }))}.${b64url(JSON.stringify(claims))}`;
  const signature = sign(alg === 'RS256' ? 'RSA-SHA256' : null, Buffer.from(input), key);
  return `${input}.${b64url(signature)}`;
}

/** The filename options form.ts gives form-data: a safe nested path as `filepath`. */
function fileOptions(filename) {
  const normalized = filename.replace(/\\/g, '/');
  const safe = !normalized.startsWith('/') && normalized.split('/').every((s) => s && s !== '.' && s !== '..');
  const basename = normalized.split('/').pop();
  return safe && normalized.includes('/') ? { filename: basename, filepath: normalized } : { filename: basename };
}

/** One LibreChat upload: `files` is [[filename, Buffer], ...]; `identity` {kind, id, version?}. */
export async function upload(base, headers, identity, files, { batch = false, readOnly = false, user } = {}) {
  const form = new FormData();
  form.append('kind', identity.kind);
  form.append('id', identity.id);
  if (identity.version != null) form.append('version', String(identity.version));
  if (batch && readOnly) form.append('read_only', 'true');
  for (const [filename, data] of files) {
    form.append('file', Readable.from([data]), fileOptions(filename)); // a stream: chunked, no length
  }
  const response = await axios.post(`${base}/upload${batch ? '/batch' : ''}`, form, {
    headers: { ...form.getHeaders(), 'User-Agent': 'LibreChat/1.0', 'User-Id': user, ...headers },
    maxContentLength: MAX_FILE_SIZE, maxBodyLength: MAX_FILE_SIZE, timeout: 120000,
    validateStatus: () => true,
  });
  return { status: response.status, body: response.data };
}

/** A GET built as process.js builds it: the path segments as they are, unencoded. */
export async function get(base, path, headers, query) {
  const response = await axios.get(`${base}${path}`, {
    params: query, headers: { 'User-Agent': 'LibreChat/1.0', ...headers },
    responseType: 'arraybuffer', validateStatus: () => true, timeout: 10000,
  });
  const body = Buffer.from(response.data);
  let json = null;
  try { json = JSON.parse(body.toString('utf8')); } catch { /* a file's bytes */ }
  return {
    status: response.status, text: body.toString('utf8'), json,
    content_disposition: response.headers['content-disposition'] ?? null,
  };
}
