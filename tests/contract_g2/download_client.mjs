#!/usr/bin/env node
/*
 * LibreChat's download of one generated file (process.js: axios, the ids in the URL as
 * they are), following a redirect as its axios does by default. Prints ONE JSON object:
 * the final status, the bytes' sha256 and size, the headers LibreChat forwards to the
 * browser, and where the bytes came from.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 LIBRECHAT_CODE_API_KEY=<key> \
 *       DOWNLOAD_PATH=/download/<session>/<file> node download_client.mjs
 */
import { createHash } from 'node:crypto';
import axios from 'axios';
import { failer, keepTrafficLocal } from '../contract_shared.mjs';

const fail = failer('download_client');
process.on('unhandledRejection', fail);
const { LIBRECHAT_CODE_BASEURL: BASE, LIBRECHAT_CODE_API_KEY: KEY, DOWNLOAD_PATH: PATH } = process.env;
if (!BASE || !KEY || !PATH) fail(new Error('LIBRECHAT_CODE_BASEURL, LIBRECHAT_CODE_API_KEY, DOWNLOAD_PATH are required'));
keepTrafficLocal();

const response = await axios.get(`${BASE}${PATH}`, {
  headers: { 'User-Agent': 'LibreChat/1.0', 'X-API-Key': KEY },
  responseType: 'arraybuffer', validateStatus: () => true, timeout: 60000, maxContentLength: 150 * 1024 * 1024,
});
const body = Buffer.from(response.data);
process.stdout.write(JSON.stringify({
  status: response.status,
  size: body.length,
  sha256: createHash('sha256').update(body).digest('hex'),
  content_type: response.headers['content-type'] ?? null,
  content_disposition: response.headers['content-disposition'] ?? null,
  final_url: response.request?.res?.responseUrl ?? null,
  redirects: response.request?._redirectable?._redirectCount ?? null,
}) + '\n');
