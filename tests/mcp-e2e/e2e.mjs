// End to end: the official MCP TypeScript SDK drives `sandgraph serve`,
// over stdio and over Streamable HTTP.
//
//   node e2e.mjs <sandgraph-binary> <graphs-dir> [<config.toml>]
//
// The graphs folder must hold echo_graph and greet_graph; the config must
// expose loop_graph as a tool (`[graphs.loop_graph] as_tool = true`) and the
// folder hold it, for the progress checks. Prints one line per check and a
// final `N passed, M failed`; exits non-zero on any failure.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { isDeepStrictEqual } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [bin, graphs, config] = process.argv.slice(2);
if (!bin || !graphs) {
  console.error('usage: node e2e.mjs <sandgraph-binary> <graphs-dir> [<config.toml>]');
  process.exit(2);
}
const serveArgs = ['serve', '--graphs', graphs, '--no-cache', ...(config ? ['--config', config] : [])];

let passed = 0;
let failed = 0;

function check(name, ok, detail) {
  if (ok) {
    passed += 1;
    console.log(`ok   ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL ${name}${detail === undefined ? '' : `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`}`);
  }
}

const text = (result) => (result.content?.length === 1 && result.content[0].type === 'text' ? result.content[0].text : undefined);

/** The checks every transport must pass. */
async function scenario(label, client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check(`${label}: tools/list has echo_graph and greet_graph`, names.includes('echo_graph') && names.includes('greet_graph'), names);
  const greet = tools.find((t) => t.name === 'greet_graph');
  check(
    `${label}: greet_graph's inputSchema is the compiled parameter schema`,
    greet?.inputSchema?.type === 'object' && isDeepStrictEqual(greet.inputSchema.required, ['name', 'style'])
      && isDeepStrictEqual(greet.inputSchema.properties?.style?.enum, ['formal', 'casual']),
    greet?.inputSchema,
  );
  check(`${label}: tools have an outputSchema`, tools.every((t) => t.outputSchema?.type === 'object'), tools.map((t) => t.outputSchema));

  const echo = await client.callTool({ name: 'echo_graph', arguments: { input: { topic: 'ts' } } });
  const state = { topic: 'ts', log: ['seen:ts'] };
  check(`${label}: echo returns the final state as structuredContent`, echo.isError !== true && isDeepStrictEqual(echo.structuredContent, state), echo);
  check(`${label}: echo's text block is the pretty JSON`, text(echo) === JSON.stringify(state, null, 2), text(echo));

  const hello = await client.callTool({ name: 'greet_graph', arguments: { name: 'Ada', style: 'casual', times: 2 } });
  check(`${label}: greet greets`, hello.structuredContent?.greeting === 'Hey Ada! Hey Ada!', hello);

  const invalid = await client.callTool({ name: 'greet_graph', arguments: { name: 'Ada', style: 'loud' } });
  check(
    `${label}: invalid arguments are an isError result`,
    invalid.isError === true && text(invalid)?.startsWith('[INVALID_ARGS] invalid arguments: '),
    invalid,
  );
  const refused = await client.callTool({ name: 'greet_graph', arguments: { name: 'Ada', style: 'formal', times: 11 } });
  check(
    `${label}: the graph's validation is an isError result`,
    refused.isError === true && text(refused) === '[validation] times must be at most 10',
    refused,
  );

  // Progress: the SDK dispatches notifications on a later microtask but a
  // response at once, so notifications that arrive in the same read as the
  // result may miss their `onprogress` callback. What the server sent is
  // checked on the wire, in arrival order, through the transport.
  const wire = [];
  const transport = client.transport;
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    wire.push(message);
    deliver?.(message, extra);
  };
  const counted = await client.callTool(
    { name: 'loop_graph', arguments: { input: { target: 3 } } },
    undefined,
    { onprogress: () => {} },
  );
  transport.onmessage = deliver;
  check(`${label}: loop_graph counts to 3`, isDeepStrictEqual(counted.structuredContent, { n: 3, target: 3 }), counted);
  const result = wire.findIndex((m) => m.id !== undefined && isDeepStrictEqual(m.result?.structuredContent, { n: 3, target: 3 }));
  const token = result >= 0 ? wire[result].id : undefined;
  const progress = wire
    .slice(0, Math.max(result, 0))
    .filter((m) => m.method === 'notifications/progress' && m.params?.progressToken === token)
    .map((m) => [m.params.progress, m.params.message]);
  check(
    `${label}: one progress notification per superstep, before the result`,
    result >= 0 && isDeepStrictEqual(progress, [[1, 'step 0: count'], [2, 'step 1: count'], [3, 'step 2: count']]),
    { progress, wire },
  );

  const mermaid = await client.readResource({ uri: 'graph://loop_graph/mermaid' });
  check(`${label}: the Mermaid diagram is a resource`, mermaid.contents?.[0]?.text?.startsWith('flowchart'), mermaid);
}

async function stdioFlow() {
  const transport = new StdioClientTransport({
    command: bin,
    args: serveArgs,
    env: { ...process.env, SANDGRAPH_LOG: 'warn' },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'sandgraph-e2e', version: '1.0.0' });
  await client.connect(transport);
  check('stdio: connected, server is sandgraph', client.getServerVersion()?.name === 'sandgraph', client.getServerVersion());
  await scenario('stdio', client);
  await client.close();
}

/** Starts `sandgraph serve --http`, resolves with the child and its URL. */
async function startHttp(token) {
  const child = spawn(bin, [...serveArgs, '--http', '127.0.0.1:0', '--token-env', 'E2E_MCP_TOKEN'], {
    env: { ...process.env, SANDGRAPH_LOG: 'warn', E2E_MCP_TOKEN: token },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let seen = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "serving MCP at" line; stderr: ${seen}`)), 60000);
    child.stderr.on('data', (chunk) => {
      seen += chunk;
      const m = /serving MCP at (\S+)/.exec(seen);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code) => reject(new Error(`sandgraph serve exited with ${code}; stderr: ${seen}`)));
  });
  child.stderr.on('data', (chunk) => process.stderr.write(chunk));
  return { child, url };
}

async function httpFlow() {
  const token = 'e2e-token-' + Math.random().toString(36).slice(2);
  const { child, url } = await startHttp(token);
  try {
    const noToken = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    check('http: a request without the token is refused with 401', noToken.status === 401, noToken.status);

    const transport = new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
    const client = new Client({ name: 'sandgraph-e2e', version: '1.0.0' });
    await client.connect(transport);
    check('http: connected, server is sandgraph', client.getServerVersion()?.name === 'sandgraph', client.getServerVersion());
    await scenario('http', client);
    await client.close();
  } finally {
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const [code, signal] = await exited;
    check('http: SIGTERM shuts the server down cleanly', code === 0, { code, signal });
  }
}

for (const [name, flow] of [['stdio', stdioFlow], ['http', httpFlow]]) {
  try {
    await flow();
  } catch (e) {
    check(`${name}: flow ran to the end`, false, e?.stack ?? String(e));
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
