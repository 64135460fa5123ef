#!/usr/bin/env node
/*
 * Current LibreChat with two users of one tenant: a skill bundle uploaded once, its refs
 * injected into every user's runs (as primeInvokedSkills does), outputs with names URLs
 * cannot carry raw, and LibreChat's own reads of them. Drives the REAL code tool of
 * @librechat/agents 3.9.2 (its ToolNode-style invoke: a ToolCall, content + artifact)
 * and LibreChat-shaped axios/form-data calls (librechat.mjs). Prints ONE JSON object.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 G2_PRIVATE_KEY_PEM=<PEM> G2_KID=<kid>
 *       G2_TENANT=<tenant> node files_client.mjs
 */
import { agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import { get, isValidID, mint, upload } from './librechat.mjs';

const fail = failer('files_client');
process.on('unhandledRejection', fail);
const BASE = process.env.LIBRECHAT_CODE_BASEURL;
const KEY = { pem: process.env.G2_PRIVATE_KEY_PEM, kid: process.env.G2_KID, tenant: process.env.G2_TENANT };
if (!BASE || !KEY.pem || !KEY.kid || !KEY.tenant) fail(new Error('LIBRECHAT_CODE_BASEURL, G2_* are required'));
const watchdog = setTimeout(() => fail(new Error('timed out')), 120000);
keepTrafficLocal();

const ALICE = '64f0c0ffee00000000000a11';
const BOB = '64f0c0ffee00000000000b0b';
const SKILL = '6650aa00aa00aa00aa00skil';
const bearer = (user) => ({ Authorization: `Bearer ${mint({ ...KEY, user })}` });

const agents = await importIsolated(() => import('@librechat/agents'), 'files-client-').catch(fail);
const { createCodeExecutionTool, Constants } = agents;

let seq = 0;
/** Invoke like ToolNode: a ToolCall, so we get content AND artifact. */
async function invoke(user, args, files) {
  const tool = createCodeExecutionTool({ user_id: user, files, authHeaders: async () => bearer(user) });
  const call = { type: 'tool_call', id: `call_files_${++seq}`, name: Constants.EXECUTE_CODE, args };
  try {
    const message = await tool.invoke(call);
    return { threw: false, content: message.content, artifact: message.artifact ?? null };
  } catch (e) {
    return { threw: true, error: String(e?.message ?? e), content: null, artifact: null };
  }
}

/** The refs LibreChat builds from a reply's outputs for the user's next turn (kind user). */
const ownRefs = (artifact) => (artifact?.files ?? []).filter((f) => !f.inherited).map((f) => ({
  id: f.id, resource_id: ALICE, name: f.name, storage_session_id: f.storage_session_id ?? artifact.session_id, kind: 'user',
}));

/** What LibreChat does with each output: download it, and check it is fresh. */
async function fetchOutputs(user, artifact) {
  const fetched = {};
  for (const f of (artifact?.files ?? []).filter((file) => !file.inherited)) {
    const sid = f.storage_session_id ?? artifact.session_id;
    const query = { kind: 'user', id: user };
    const download = await get(BASE, `/download/${sid}/${f.id}`, bearer(user), query);
    const object = await get(BASE, `/sessions/${sid}/objects/${f.id}`, bearer(user), query);
    fetched[f.name] = {
      id: f.id, status: download.status, body: download.text, content_disposition: download.content_disposition,
      object_status: object.status, last_modified: object.json?.lastModified ?? null,
      fallback_route_ok: isValidID(sid) && isValidID(f.id),
    };
  }
  return fetched;
}

try {
  // The skill: uploaded once by an admin, as crud.js batchUploadCodeEnvFiles does.
  const bundle = [
    ['skills/pdf/SKILL.md', Buffer.from('# pdf\n')],
    ['skills/pdf/scripts/__init__.py', Buffer.from('')],
    ['skills/pdf/scripts/pages.py', Buffer.from('def count():\n    return 7\n')],
    ['skills/pdf/lib/__init__.py', Buffer.from('')],
    ['skills/pdf/lib/names.py', Buffer.from('TITLE = "report"\n')],
    ['skills/pdf/a/README.md', Buffer.from('first readme\n')],
    ['skills/pdf/b/README.md', Buffer.from('second readme\n')],
  ];
  const skillUpload = await upload(BASE, bearer(ALICE), { kind: 'skill', id: SKILL, version: 3 }, bundle,
    { batch: true, readOnly: true, user: ALICE });
  const skillSession = skillUpload.body.storage_session_id;
  // primeSkillFiles: refs from the echoed filenames, SKILL.md left out.
  const skillRefs = (skillUpload.body.files ?? []).filter((f) => !f.filename.endsWith('/SKILL.md')).map((f) => ({
    id: f.fileId, resource_id: SKILL, name: f.filename, storage_session_id: skillSession, kind: 'skill', version: 3,
  }));

  const aliceCode = [
    'import os',
    'from skills.pdf.scripts import pages',
    'from skills.pdf.lib import names',
    "print(names.TITLE, pages.count(), open('/mnt/data/skills/pdf/a/README.md').read().strip(), open('/mnt/data/skills/pdf/b/README.md').read().strip())",
    "open('/mnt/data/alice_notes.txt', 'w').write('alice secret')",
    "for name in ['Q3 #1.csv', 'what?.txt', '100% done.txt', 'résumé final.txt']:",
    "    open('/mnt/data/' + name, 'w').write(name)",
    "os.makedirs('plots', exist_ok=True); open('plots/a.svg', 'w').write('<svg/>')",
    "open('skills/pdf/scripts/pages.py', 'a').write('# changed by a run\\n')",
    "import py_compile; py_compile.compile('skills/pdf/lib/names.py', doraise=True)",
  ].join('\n');
  const alice = await invoke(ALICE, { lang: 'py', code: aliceCode }, skillRefs);
  const aliceFetched = await fetchOutputs(ALICE, alice.artifact);

  // Bob, another user of the tenant, with the same skill refs, and no session id.
  const bobCode = [
    'import os',
    "seen = sorted(os.path.join(d, f) for d, _, fs in os.walk('.') for f in fs)",
    'print(seen)',
  ].join('\n');
  const bob = await invoke(BOB, { lang: 'py', code: bobCode }, skillRefs);
  const aliceSession = alice.artifact?.session_id;
  const pagesRef = skillRefs.find((ref) => ref.name.endsWith('/pages.py'));
  const notes = alice.artifact?.files?.find((f) => f.name === 'alice_notes.txt');
  const bobReads = {
    listing: (await get(BASE, `/files/${aliceSession}`, bearer(BOB), { detail: 'summary' })).status,
    download: (await get(BASE, `/download/${aliceSession}/${notes?.id}`, bearer(BOB), { kind: 'user', id: BOB })).status,
    object: (await get(BASE, `/sessions/${aliceSession}/objects/${notes?.id}`, bearer(BOB), { kind: 'user', id: BOB })).status,
    via_skill_session: (await get(BASE, `/download/${skillSession}/${notes?.id}`, bearer(BOB), { kind: 'skill', id: SKILL })).status,
    skill_file: (await get(BASE, `/download/${skillSession}/${pagesRef?.id}`, bearer(BOB), { kind: 'skill', id: SKILL, version: '3' })).text,
  };

  // Alice's next turn: refs to her own outputs land her in her own session again; she
  // removes one file, and the reply says so.
  const again = await invoke(ALICE, {
    lang: 'py',
    code: "import os\nprint(open('/mnt/data/alice_notes.txt').read())\nos.remove('/mnt/data/what?.txt')",
  }, ownRefs(alice.artifact));

  clearTimeout(watchdog);
  process.stdout.write(JSON.stringify({
    client: { package: '@librechat/agents', version: agentsVersion(import.meta.url) },
    skill_upload: skillUpload, skill_refs: skillRefs, alice, alice_fetched: aliceFetched, bob, bob_reads: bobReads, again,
  }) + '\n');
} catch (e) {
  fail(e);
}
