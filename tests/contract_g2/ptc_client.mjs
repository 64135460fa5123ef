#!/usr/bin/env node
/*
 * Programmatic tool calling and the stateful profile through the REAL @librechat/agents
 * 3.9.2 tools (run_tools_with_code, run_tools_with_bash, bash_tool) against the service on
 * loopback, with LibreChat's own tokens; prints ONE JSON object.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 G2_PRIVATE_KEY_PEM=<PEM> \
 *       G2_KID=<kid> G2_TENANT=<tenant> G2_USER_ID=<user> node ptc_client.mjs
 *
 * The tools are invoked as ToolNode invokes them (dist/esm/tools/ToolNode.mjs): a ToolCall
 * carrying the agent's toolMap and toolDefs (allowed_callers: ['code_execution']), so the
 * package itself runs the tools the service asks for and posts their results back. A
 * signal on the RunnableConfig makes it send X-LibreChat-Code-Request-ID, and its abort
 * POSTs /exec/programmatic/cancel {request_id} (ProgrammaticToolCalling.ts makeRequest).
 * Every scenario's content/artifact (or the error the package throws) is printed; the
 * pytest side (test_contract_g2.py) holds what each must be.
 */
import { randomBytes } from 'node:crypto';
import { agentTools, agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';
import { mint } from './librechat.mjs';

const fail = failer('ptc_client');
process.on('unhandledRejection', fail);
const BASEURL = process.env.LIBRECHAT_CODE_BASEURL;
const USER_ID = process.env.G2_USER_ID;
const watchdog = setTimeout(() => fail(new Error('timed out')), 120000);
keepTrafficLocal();

const A = await importIsolated(() => import('@librechat/agents'), 'ptc-client-').catch(fail);
// The package's own pinned @langchain/core `tool`, re-exported here.
const { tool } = await import(new URL('./node_modules/@librechat/agents/dist/esm/langchain/index.mjs', import.meta.url));

const tokenFor = (user) => mint({
  pem: process.env.G2_PRIVATE_KEY_PEM, kid: process.env.G2_KID, tenant: process.env.G2_TENANT, user,
});
const headersFor = (user) => async () => ({ Authorization: `Bearer ${tokenFor(user)}` });
const authHeaders = headersFor(USER_ID);

const called = [];
const { toolMap, toolDefs } = agentTools(tool, called);

let seq = 0;
/** One ToolCall as ToolNode.runTool builds it; content and artifact, or what was thrown. */
async function invoke(made, name, args, config = {}) {
  const call = { id: `toolu_${++seq}`, name, args, type: 'tool_call', stepId: 'step_1', turn: 0, toolMap, toolDefs, programmaticToolName: name };
  const started = Date.now();
  try {
    const message = await made.invoke(call, config);
    return { ms: Date.now() - started, content: message.content, artifact: message.artifact ?? null };
  } catch (e) {
    return { ms: Date.now() - started, threw: { name: e?.name, message: String(e?.message ?? e) } };
  }
}
const bash = (made, command) => invoke(made, 'bash_tool', { command });
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

const PY = `import asyncio
first = await get_weather(city="Paris")
second = await get_weather("Oslo")
together = await asyncio.gather(get_weather(city="Rome"), get_weather(city="Lima"))
try:
    await failing_tool()
except Exception as e:
    print("caught:", e)
open("/mnt/data/report.txt", "w").write(str([first, second, *together]))
print(first["sky"], second["city"], [t["city"] for t in together])`;

const BASH = `w=$(get_weather '{"city": "NY"}'); echo "got $w"
failing_tool || echo "failed with $?"
echo "$w" > /mnt/data/weather.json`;

try {
  const ptc = A.createProgrammaticToolCallingTool({ baseUrl: BASEURL, authHeaders });
  const out = { client: { version: agentsVersion(import.meta.url) } };

  // Sequential calls, two gathered in one round, a failing tool caught by the program.
  out.python = { ...(await invoke(ptc, 'run_tools_with_code', { code: PY })), called: called.splice(0) };

  // Two programmatic runs at once: each continuation is its own.
  out.parallel = await Promise.all(['Cairo', 'Quito'].map((city) =>
    invoke(ptc, 'run_tools_with_code', { code: `print((await get_weather(city="${city}"))["city"])` })));
  called.splice(0);

  // Bash: tools are shell functions taking one JSON argument.
  const bptc = A.createBashProgrammaticToolCallingTool({ baseUrl: BASEURL, authHeaders });
  out.bash = { ...(await invoke(bptc, 'run_tools_with_bash', { code: BASH })), called: called.splice(0) };

  // The factory's run timeout, hit in the round after a tool call.
  const hurried = A.createProgrammaticToolCallingTool({ baseUrl: BASEURL, authHeaders, runTimeoutMs: 2000 });
  out.timeout = await invoke(hurried, 'run_tools_with_code', { code: 'await get_weather(city="x")\nwhile True:\n    pass' });
  called.splice(0);

  // The stateful profile: one conversation's bash calls share /mnt/data; bob's never does.
  const hint = `conv-${randomBytes(6).toString('hex')}`;
  const stateful = (headers) => A.createBashExecutionTool({
    baseUrl: BASEURL, authHeaders: headers, statefulSessions: true, executionProfile: 'stateful', runtimeSessionHint: hint,
  });
  out.prewarm = await bash(stateful(authHeaders), 'true');
  out.stateful_write = await bash(stateful(authHeaders), 'echo kept > /mnt/data/note.txt');
  out.stateful_read = await bash(stateful(authHeaders), 'cat /mnt/data/note.txt');
  out.other_user = await bash(stateful(headersFor(`${USER_ID}-bob`)), 'cat /mnt/data/note.txt || echo missing');

  // Abort mid-run: the package POSTs /cancel with the request id, and the run stops at once.
  const held = A.createProgrammaticToolCallingTool({ baseUrl: BASEURL, authHeaders, executionProfile: 'stateful', runtimeSessionHint: hint });
  const abort = new AbortController();
  setTimeout(() => abort.abort(), 1500);
  const code = 'import time\nopen("/mnt/data/started.txt", "w").write("1")\ntime.sleep(4)\n'
    + 'open("/mnt/data/late.txt", "w").write("late")\nprint(await get_weather(city="x"))';
  out.aborted = await invoke(held, 'run_tools_with_code', { code, timeout: 10000 }, { signal: abort.signal });
  await sleep(5000); // past the moment the run would have written late.txt
  out.after_abort = await bash(stateful(authHeaders), 'ls /mnt/data');
  out.called_after_abort = called.splice(0);

  clearTimeout(watchdog);
  process.stdout.write(`${JSON.stringify(out)}\n`);
} catch (e) {
  fail(e);
}
