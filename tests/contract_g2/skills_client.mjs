#!/usr/bin/env node
/*
 * The document skills as LibreChat 3.9.2 runs them: each skill of tests/skills/ uploaded
 * once as a batch (kind=skill, its nested paths, read_only), then a user's turns through
 * the REAL code tool of @librechat/agents: one run makes the user's files, and later runs
 * call the skills' scripts on them (`python scripts/...` from the skill's folder, as the
 * SKILL.md files say), with the skill's refs injected as primeSkillFiles injects them.
 * Prints ONE JSON object: each run's content and artifact, and what a last run read back.
 *
 * With `elsewhere` (a fleet of runners): the pdf skill uploaded by another user of the tenant,
 * then the user's runs that read it, each in a new session, until one lands on another runner than the skill's (a session id's
 * first character names its runner); prints the skill's session and those runs.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 G2_PRIVATE_KEY_PEM=<PEM> G2_KID=<kid>
 *       G2_TENANT=<tenant> node skills_client.mjs [elsewhere]
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import { mint, upload } from './librechat.mjs';

const fail = failer('skills_client');
process.on('unhandledRejection', fail);
const BASE = process.env.LIBRECHAT_CODE_BASEURL;
const KEY = { pem: process.env.G2_PRIVATE_KEY_PEM, kid: process.env.G2_KID, tenant: process.env.G2_TENANT };
if (!BASE || !KEY.pem || !KEY.kid || !KEY.tenant) fail(new Error('LIBRECHAT_CODE_BASEURL, G2_* are required'));
const watchdog = setTimeout(() => fail(new Error('timed out')), 140000);
keepTrafficLocal();

const USER = '64f0c0ffee0000000000d0c5';
const SKILLS = fileURLToPath(new URL('../skills/', import.meta.url));
const SKILL_IDS = { docx: '6650aa00aa00aa00aa00d0cx', xlsx: '6650aa00aa00aa00aa00x1sx', pptx: '6650aa00aa00aa00aa00pptx', pdf: '6650aa00aa00aa00aa000pdf' };
// Who primed a skill's upload: another user of the tenant (a skill is the organization's).
const AUTHOR = '64f0c0ffee0000000000a07h';
const bearer = (user = USER) => ({ Authorization: `Bearer ${mint({ ...KEY, user })}` });

const agents = await importIsolated(() => import('@librechat/agents'), 'skills-client-').catch(fail);
const { createCodeExecutionTool, Constants } = agents;

let seq = 0;
/** Invoke like ToolNode: a ToolCall, so we get content AND artifact. */
async function invoke(args, files) {
  const tool = createCodeExecutionTool({ user_id: USER, files, authHeaders: async () => bearer() });
  const call = { type: 'tool_call', id: `call_skills_${++seq}`, name: Constants.EXECUTE_CODE, args };
  try {
    const message = await tool.invoke(call);
    return { threw: false, content: message.content, artifact: message.artifact ?? null };
  } catch (e) {
    return { threw: true, error: String(e?.message ?? e), content: null, artifact: null };
  }
}

const walk = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((entry) => (
  entry.isDirectory() ? walk(join(dir, entry.name)) : [join(dir, entry.name)]));

/** A skill's files as the batch carries them: skills/<name>/<path>; the office helper in
 * every skill that drives LibreOffice (the originals carry a copy each). */
function bundle(name) {
  const files = walk(join(SKILLS, name)).map((path) => [`skills/${name}/${relative(join(SKILLS, name), path)}`, readFileSync(path)]);
  if (name !== 'pdf') files.push([`skills/${name}/scripts/office/soffice.py`, readFileSync(join(SKILLS, 'office/soffice.py'))]);
  return files;
}

/** The refs LibreChat keeps of a user's outputs, for the next turn (kind user). */
const userRefs = (artifact, wanted) => (artifact?.files ?? []).filter((f) => wanted.includes(f.name)).map((f) => ({
  id: f.id, resource_id: USER, name: f.name, storage_session_id: f.storage_session_id ?? artifact.session_id, kind: 'user',
}));

const MAKE_INPUTS = `
from openpyxl import Workbook
from docx import Document
from pptx import Presentation
from reportlab.pdfgen import canvas

wb = Workbook(); ws = wb.active; ws.title = "Budget"
ws.append(["Item", "Cost", "Share"])
for row, (item, cost) in enumerate([("Rent", 1200), ("Food", 450), ("Travel", 350)], start=2):
    ws.append([item, cost, f"=B{row}/B$5"])
ws.append(["Total", "=SUM(B2:B4)", "=C2+C3+C4"])
ws["D2"] = "=B2/0"
wb.save("/mnt/data/budget.xlsx")

doc = Document(); doc.add_heading("Draft report", 1); doc.add_paragraph("Numbers are in."); doc.save("/mnt/data/report.docx")

prs = Presentation()
for title in ("Welcome", "Plan", "Questions"):
    prs.slides.add_slide(prs.slide_layouts[0]).shapes.title.text = title
prs.save("/mnt/data/deck.pptx")

c = canvas.Canvas("/mnt/data/form.pdf")
c.drawString(72, 750, "Name")
c.acroForm.textfield(name="name", x=130, y=740, width=200, height=20)
c.acroForm.checkbox(name="agree", x=130, y=700)
c.save()
print("inputs made")
`;

const RUNS = {
  xlsx: 'cd /mnt/data/skills/xlsx && python scripts/recalc.py /mnt/data/budget.xlsx 60',
  docx: [
    'cd /mnt/data && pandoc --track-changes=all report.docx -o report.md && head -1 report.md',
    'python skills/docx/scripts/office/unpack.py report.docx unpacked',
    "sed -i 's/Draft report/Final report/' unpacked/word/document.xml",
    'python skills/docx/scripts/office/pack.py unpacked edited.docx',
    'python skills/docx/scripts/office/soffice.py --headless --convert-to pdf edited.docx >/dev/null 2>&1',
    'pdftoppm -png -r 40 edited.pdf page && ls page-*.png && pdftotext edited.pdf - | head -1',
  ].join('\n'),
  pptx: [
    'cd /mnt/data/skills/pptx && python scripts/thumbnail.py /mnt/data/deck.pptx /mnt/data/grid.jpg 2',
    'python -m markitdown /mnt/data/deck.pptx | grep -c "^# "',
  ].join('\n'),
  pdf: [
    'cd /mnt/data/skills/pdf && python scripts/check_fillable_fields.py /mnt/data/form.pdf',
    'python scripts/extract_form_field_info.py /mnt/data/form.pdf /mnt/data/fields.json',
    'echo \'[{"field_id": "name", "value": "Grace Hopper"}, {"field_id": "agree", "value": "/Yes"}]\' > /mnt/data/values.json',
    'python scripts/fill_fillable_fields.py /mnt/data/form.pdf /mnt/data/values.json /mnt/data/filled.pdf',
    'python scripts/convert_pdf_to_images.py /mnt/data/filled.pdf /mnt/data/pages',
    'qpdf --empty --pages /mnt/data/filled.pdf /mnt/data/form.pdf -- /mnt/data/both.pdf && qpdf --show-npages /mnt/data/both.pdf',
  ].join('\n'),
};
const INPUTS = { xlsx: ['budget.xlsx'], docx: ['report.docx'], pptx: ['deck.pptx'], pdf: ['form.pdf'] };

const READ_BACK = `
import json
from openpyxl import load_workbook
from docx import Document
from PIL import Image
from pypdf import PdfReader
ws = load_workbook("/mnt/data/budget.xlsx", data_only=True)["Budget"]
print(json.dumps({
    "budget": [ws["B5"].value, round(ws["C2"].value, 4), ws["D2"].value],
    "edited_heading": Document("/mnt/data/edited.docx").paragraphs[0].text,
    "grid": Image.open("/mnt/data/grid.jpg").size,
    "filled": {k: v.get("/V") for k, v in PdfReader("/mnt/data/filled.pdf").get_fields().items()},
}))
`;

/** A skill uploaded as one batch, and the refs primeSkillFiles makes of the echoed filenames (SKILL.md left out). */
async function uploadSkill(name, user = USER) {
  const identity = { kind: 'skill', id: SKILL_IDS[name], version: 1 };
  const uploaded = await upload(BASE, bearer(user), identity, bundle(name), { batch: true, readOnly: true, user });
  const refs = (uploaded.body.files ?? []).filter((f) => !f.filename.endsWith('/SKILL.md')).map((f) => ({
    id: f.fileId, resource_id: SKILL_IDS[name], name: f.filename, storage_session_id: uploaded.body.storage_session_id,
    kind: 'skill', version: 1,
  }));
  return { uploaded, refs };
}

const READ_SKILL = 'cd /mnt/data/skills/pdf && ls scripts && wc -c < scripts/check_fillable_fields.py';

async function elsewhere() {
  const { uploaded, refs } = await uploadSkill('pdf', AUTHOR);
  const session = uploaded.body.storage_session_id;
  const runs = [];
  while (runs.length < 12 && !runs.some((r) => r.artifact?.session_id?.[0] !== session[0])) {
    runs.push(await invoke({ lang: 'bash', code: READ_SKILL }, refs));
  }
  return { status: uploaded.status, skill_session: session, runs };
}

/** Every document skill uploaded, then a user's turns that run their scripts, then a read-back. */
async function documents() {
  const uploads = {};
  const skillRefs = {};
  for (const name of Object.keys(SKILL_IDS)) {
    const { uploaded, refs } = await uploadSkill(name);
    uploads[name] = { status: uploaded.status, files: (uploaded.body.files ?? []).map((f) => f.filename) };
    skillRefs[name] = refs;
  }

  const inputs = await invoke({ lang: 'py', code: MAKE_INPUTS }, []);
  const runs = {};
  let latest = inputs.artifact;
  const mine = {};
  for (const name of Object.keys(RUNS)) {
    const refs = [...skillRefs[name], ...userRefs(inputs.artifact, INPUTS[name])];
    runs[name] = await invoke({ lang: 'bash', code: RUNS[name] }, refs);
    latest = runs[name].artifact ?? latest;
    for (const f of runs[name].artifact?.files ?? []) if (!f.inherited) mine[f.name] = f;
  }
  // The outputs the skills wrote (and the workbook they recalculated), read back in a later turn.
  const outputs = ['budget.xlsx', 'edited.docx', 'grid.jpg', 'filled.pdf'];
  const refs = outputs.map((name) => mine[name]).filter(Boolean).map((f) => ({
    id: f.id, resource_id: USER, name: f.name, storage_session_id: f.storage_session_id ?? latest.session_id, kind: 'user',
  }));
  const readBack = await invoke({ lang: 'py', code: READ_BACK }, refs);
  return { uploads, inputs, runs, outputs: Object.keys(mine).sort(), read_back: readBack };
}

try {
  const result = process.argv[2] === 'elsewhere' ? await elsewhere() : await documents();
  clearTimeout(watchdog);
  process.stdout.write(JSON.stringify({
    client: { package: '@librechat/agents', version: agentsVersion(import.meta.url) }, ...result,
  }) + '\n');
} catch (e) {
  fail(e);
}
