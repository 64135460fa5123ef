#!/usr/bin/env node
/*
 * Programmatic tool calling through the REAL @librechat/agents 3.1.63 tool
 * (run_tools_with_code, X-API-Key) against the service on loopback; prints ONE JSON object.
 *
 *   env LIBRECHAT_CODE_BASEURL=http://127.0.0.1:PORT/v1 LIBRECHAT_CODE_API_KEY=<key> node ptc_client.mjs
 *
 * 3.1.63 (dist/esm/tools/ProgrammaticToolCalling.mjs): createProgrammaticToolCallingTool
 * takes {apiKey, baseUrl}; POST {baseUrl}/exec/programmatic with X-API-Key, python only,
 * no cancel and no profile; ToolNode hands it the toolMap and toolDefs in the ToolCall and
 * it runs the tools the service asks for. A session_id in the ToolCall without injected
 * files would first GET /files/{session}, so none is given here.
 */
import { agentTools, agentsVersion, failer, importIsolated, keepTrafficLocal } from '../contract_shared.mjs';

const fail = failer('ptc_client (3.1.63)');
process.on('unhandledRejection', fail);
const watchdog = setTimeout(() => fail(new Error('timed out')), 90000);
keepTrafficLocal();

const A = await importIsolated(() => import('@librechat/agents'), 'ptc-g1-').catch(fail);
const { tool } = await import('@langchain/core/tools');

const called = [];
const { toolMap, toolDefs } = agentTools(tool, called);

let seq = 0;
async function invoke(made, args) {
  const call = { id: `toolu_${++seq}`, name: 'run_tools_with_code', args, type: 'tool_call', stepId: 'step_1', turn: 0, toolMap, toolDefs };
  try {
    const message = await made.invoke(call);
    return { content: message.content, artifact: message.artifact ?? null };
  } catch (e) {
    return { threw: { name: e?.name, message: String(e?.message ?? e) } };
  }
}

const PY = `import asyncio
first = await get_weather(city="Paris")
together = await asyncio.gather(get_weather(city="Rome"), get_weather(city="Lima"))
try:
    await failing_tool()
except Exception as e:
    print("caught:", e)
open("/mnt/data/report.txt", "w").write(str([first, *together]))
print(first["sky"], [t["city"] for t in together])`;

try {
  const ptc = A.createProgrammaticToolCallingTool({
    apiKey: process.env.LIBRECHAT_CODE_API_KEY, baseUrl: process.env.LIBRECHAT_CODE_BASEURL,
  });
  const python = { ...(await invoke(ptc, { code: PY })), called: called.splice(0) };
  const parallel = await Promise.all(['Cairo', 'Quito'].map((city) =>
    invoke(ptc, { code: `print((await get_weather(city="${city}"))["city"])` })));
  const failing = await invoke(ptc, { code: 'await get_weather(city="x")\nraise SystemExit(3)' });
  clearTimeout(watchdog);
  process.stdout.write(`${JSON.stringify({ client: { version: agentsVersion(import.meta.url) }, python, parallel, failing })}\n`);
} catch (e) {
  fail(e);
}
