// Test peer: an MCP server on the TypeScript SDK's 2025-11-25 task runtime
// (@modelcontextprotocol/sdk 1.32.2), for the Python client tests.
// Tool names and behaviour are a contract with those tests: see README.md.
// The job tools (start_export, get_export_status, download_export, cancel_export, slow_progress) are
// plain tools shared with demo/server.py: see registerJobTools.
//
//   node server.mjs --transport stdio
//   node server.mjs --transport http --port P [--stateless]
//
// Env: PEER_LOG=/path.jsonl (one line per incoming JSON-RPC request, and {event: 'terminal', taskId, status, ts}
//      when a task tool's task ends: the server's own record of the moment),
//      PEER_POLL_MS (pollInterval, default 200), PEER_ELICIT_TIMEOUT_MS (default 600000),
//      PEER_NOTIFY=0: the task tools write their status through the store directly, so the SDK sends no
//      notifications/tasks/status (a server that never notifies; default: the SDK's own wrapper, which does).
//      PEER_AUTH_ISSUER (HTTP only): demand OAuth bearer tokens from that authorization server (oauth.mjs),
//      checked by the SDK's requireBearerAuth with RFC 7662 introspection as PEER_AUTH_CLIENT_ID /
//      PEER_AUTH_CLIENT_SECRET; the SDK's mcpAuthMetadataRouter serves the protected resource metadata.
//      A refused request is logged as {denied: status, deniedMethod} (never as a "method" line).
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CreateMessageResultSchema, ElicitResultSchema, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue, isTerminal } from '@modelcontextprotocol/sdk/experimental/tasks';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';

const { values: opts } = parseArgs({
  options: {
    transport: { type: 'string', default: 'stdio' },
    port: { type: 'string', default: '0' },
    stateless: { type: 'boolean', default: false }
  }
});
const POLL_MS = Number(process.env.PEER_POLL_MS ?? 200);
const ELICIT_TIMEOUT_MS = Number(process.env.PEER_ELICIT_TIMEOUT_MS ?? 600_000);
const PEER_LOG = process.env.PEER_LOG;
// HTTP only (a stdio child's stderr goes to its client's log): one stderr line `TASK <taskId> <status>` once a task
// tool's work has stored its outcome, so a test can wait for a task's end at the server without asking the server
// (a tasks/get would be a poll of its own in the request log).
const TRACE_TASK_ENDS = opts.transport === 'http';
const NOTIFY = process.env.PEER_NOTIFY !== '0';
// PEER_RETRY_MS (HTTP, stateful): resumable streams (SEP-1699): the SDK's InMemoryEventStore, priming events with
// this `retry`; the tool `cycling_sync` closes its own SSE stream (closeSSEStream) before it answers.
const RETRY_MS = process.env.PEER_RETRY_MS;
const logEvent = line => PEER_LOG && appendFileSync(PEER_LOG, JSON.stringify({ ts: Date.now(), pid: process.pid, ...line }) + '\n');
// Stored in a failed task's result to mean "tasks/result answers this JSON-RPC error".
const RPC_ERROR_META = 'peer.test/rpc-error';

// 1.32.2 has no notion of a task whose outcome is a JSON-RPC error: the tasks/result handler
// returns whatever TaskStore.getTaskResult returns and turns whatever it throws into a JSON-RPC
// error (keeping error.code and error.message). So the store is the one place to make a
// failed task answer "the original JSON-RPC error".
class PeerTaskStore extends InMemoryTaskStore {
  async getTaskResult(taskId, sessionId) {
    const result = await super.getTaskResult(taskId, sessionId);
    const rpcError = result?._meta?.[RPC_ERROR_META];
    if (rpcError) throw Object.assign(new Error(rpcError.message), { code: rpcError.code });
    return result;
  }
  // Synchronous and session-blind, so the request log records the status at the exact moment
  // a message arrives (before the SDK's async handlers run).
  peekStatus(taskId) {
    return this.tasks.get(taskId)?.task.status ?? null;
  }
}

// Module-level: shared by every session and, in stateless mode, by every per-request server,
// so tasks outlive the HTTP request that created them. The SDK still binds each task to the
// sessionId it was created under (InMemoryTaskStore.lookup), so sessions do not see each other's.
const taskStore = new PeerTaskStore();
const taskMessageQueue = new InMemoryTaskMessageQueue();
const callCounts = {};

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const text = t => ({ content: [{ type: 'text', text: t }] });

// --- job tools: plain tools modelling a "start a job, then poll its status" API --------------------
// Same names, arguments and reply shapes as demo/server.py (the fastmcp peer). Module-level,
// like the task store: one job table per process, shared by every session and stateless request.
const EXPORT_FAILURE_MESSAGE = 'export failed: disk quota exceeded on volume exports-1';
const exportJobs = new Map(); // jobId -> { jobId, seconds, fail, garble, rows, started, cancelledAt }
let exportCounter = 0;
const jsonResult = obj => ({ ...text(JSON.stringify(obj)), structuredContent: obj });
const errorResult = t => ({ ...text(t), isError: true });
const noSuchJob = jobId => errorResult(`no such job: ${jobId}`);
const jobElapsed = job => ((job.cancelledAt ?? Date.now()) - job.started) / 1000;
function jobState(job) {
  if (job.cancelledAt !== null) return 'cancelled';
  if (jobElapsed(job) < job.seconds) return 'running';
  return job.fail ? 'failed' : 'succeeded';
}
const jobProgress = job => job.seconds <= 0 ? 1 : Math.round(Math.min(1, jobElapsed(job) / job.seconds) * 1000) / 1000;
function jobStatus(job) {
  const state = jobState(job);
  const progress = jobProgress(job);
  const failed = state === 'failed';
  return {
    jobId: job.jobId, state, progress,
    message: failed ? EXPORT_FAILURE_MESSAGE : `exported ${Math.floor(progress * job.rows)}/${job.rows} rows`,
    error: failed ? EXPORT_FAILURE_MESSAGE : null
  };
}

function registerJobTools(server) {
  server.registerTool('start_export', {
    description: 'Starts an export job and answers at once with {jobId}; poll it with get_export_status. ' +
      'The job runs `seconds`, then succeeds with `rows` rows (or fails if `fail`). With `garble`, ' +
      'get_export_status answers a malformed status for it.',
    inputSchema: {
      seconds: z.number().default(2), fail: z.boolean().default(false),
      garble: z.boolean().default(false), rows: z.number().int().default(3)
    }
  }, async ({ seconds, fail, garble, rows }) => {
    const jobId = `exp-${++exportCounter}-${randomBytes(3).toString('hex')}`;
    exportJobs.set(jobId, {
      jobId, seconds: Math.max(0, seconds), fail, garble, rows: Math.max(0, rows), started: Date.now(), cancelledAt: null
    });
    return { ...text(`started export job ${jobId}`), structuredContent: { jobId } };
  });

  server.registerTool('get_export_status', {
    description: 'Status of an export job: {jobId, state (running|succeeded|failed|cancelled), progress (0..1), message, error}.',
    inputSchema: { jobId: z.string() }
  }, async ({ jobId }) => {
    const job = exportJobs.get(jobId);
    if (!job) return noSuchJob(jobId);
    if (job.garble) return { ...text('garbled'), structuredContent: { jobId, phase: '??' } };
    return jsonResult(jobStatus(job));
  });

  server.registerTool('download_export', {
    description: 'Rows of a succeeded export job: {jobId, rows: [{n: 1}, ...]}; an error while it is not succeeded.',
    inputSchema: { jobId: z.string() }
  }, async ({ jobId }) => {
    const job = exportJobs.get(jobId);
    if (!job) return noSuchJob(jobId);
    const state = jobState(job);
    if (state !== 'succeeded') return errorResult(`job ${jobId} is ${state}`);
    return jsonResult({ jobId, rows: Array.from({ length: job.rows }, (_, i) => ({ n: i + 1 })) });
  });

  server.registerTool('cancel_export', {
    description: 'Cancels a running export job (a finished one stays as it is); answers {jobId, state}.',
    inputSchema: { jobId: z.string() }
  }, async ({ jobId }) => {
    const job = exportJobs.get(jobId);
    if (!job) return noSuchJob(jobId);
    if (jobState(job) === 'running') job.cancelledAt = Date.now();
    return jsonResult({ jobId, state: jobState(job) });
  });

  server.registerTool('slow_progress', {
    description: "Plain synchronous tool that answers after `seconds`, sending a progress notification ('step i/n') " +
      'every `every` seconds.',
    inputSchema: { seconds: z.number().default(60), every: z.number().default(5) }
  }, async ({ seconds, every }, extra) => {
    const total = Math.max(0, seconds);
    const step = every > 0 ? every : total;
    const n = step > 0 ? Math.max(1, Math.ceil(total / step - 1e-9)) : 1;
    const progressToken = extra._meta?.progressToken;
    const start = Date.now();
    for (let i = 1; i <= n; i++) {
      await sleep(Math.max(0, start + Math.min(total, i * step) * 1000 - Date.now()));
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken, progress: i, total: n, message: `step ${i}/${n}` }
        }).catch(err => process.stderr.write(`[peer] slow_progress: ${err.message}
`));
      }
    }
    return text(`slow_progress done after ${seconds}s`);
  });
}
const stillRunning = taskId => {
  const status = taskStore.peekStatus(taskId);
  return status !== null && !isTerminal(status);
};
// Sleeps in small steps and stops early once the task was cancelled or purged (ttl).
async function work(taskId, ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (!stillRunning(taskId)) return false;
    await sleep(Math.min(50, until - Date.now()));
  }
  return stillRunning(taskId);
}

// Registers a task tool whose work goes on in the background after createTask returned. `run`
// returns [status, result] or nothing (task no longer running). Store writes go through
// extra.taskStore, the SDK's session-bound view that also emits notifications/tasks/status.
// The SDK's request-scoped store, or (PEER_NOTIFY=0) the same writes straight to the store: no notifications.
const quietStore = extra => ({
  createTask: params => extra.taskStore.createTask(params),
  getTask: taskId => extra.taskStore.getTask(taskId),
  updateTaskStatus: (taskId, status, message) => taskStore.updateTaskStatus(taskId, status, message, extra.sessionId),
  storeTaskResult: (taskId, status, result) => taskStore.storeTaskResult(taskId, status, result, extra.sessionId)
});

function taskTool(server, name, { description, inputSchema = {}, outputSchema, taskSupport, statusMessage }, run) {
  server.experimental.tasks.registerToolTask(name, { description, inputSchema, outputSchema, execution: { taskSupport } }, {
    async createTask(args, extra) {
      const ts = NOTIFY ? extra.taskStore : quietStore(extra);
      const { taskId } = await ts.createTask({ ttl: extra.taskRequestedTtl, pollInterval: POLL_MS });
      if (statusMessage) await ts.updateTaskStatus(taskId, 'working', statusMessage(args));
      // A copy taken before the work starts: InMemoryTaskStore.createTask hands out its live
      // object, so the CreateTaskResult would otherwise show whatever status the work reached
      // by serialization time (ask_user: input_required).
      const task = await ts.getTask(taskId);
      run(args, task.taskId, extra)
        .then(async outcome => {
          if (!outcome || !stillRunning(task.taskId)) return;
          const stored = ts.storeTaskResult(task.taskId, ...outcome);
          logEvent({ event: 'terminal', taskId: task.taskId, status: outcome[0] });
          await stored;
          if (TRACE_TASK_ENDS) process.stderr.write(`TASK ${task.taskId} ${outcome[0]}\n`);
        })
        // A task cancelled or purged meanwhile refuses the write (expected, but worth a line).
        // A closed per-request stateless server cannot send the status notification that
        // follows the (already done) store update: not worth one.
        .catch(err => err.message === 'Not connected' ||
          process.stderr.write(`[peer] task ${name} ${task.taskId}: ${err.message}\n`));
      return { task };
    },
    // Required by the ToolTaskHandler type; 1.32.2 serves tasks/get and tasks/result from the
    // store and never calls these.
    getTask: (_args, extra) => extra.taskStore.getTask(extra.taskId),
    getTaskResult: (_args, extra) => extra.taskStore.getTaskResult(extra.taskId)
  });
}

function buildServer() {
  const server = new McpServer(
    { name: 'mcp-temporal-tasks-ts-peer', version: '1.0.0' },
    {
      capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      taskStore,
      taskMessageQueue,
      defaultTaskPollInterval: POLL_MS
    }
  );

  taskTool(server, 'slow_echo', {
    description: 'Echoes text after `seconds`.',
    inputSchema: { seconds: z.number().default(1), text: z.string().default('hello') },
    outputSchema: { echo: z.string() },
    taskSupport: 'optional',
    statusMessage: a => `sleeping ${a.seconds}s`
  }, async (a, taskId) =>
    (await work(taskId, a.seconds * 1000)) && ['completed', { ...text(a.text), structuredContent: { echo: a.text } }]);

  // Says "completed" (a notifications/tasks/status outside any request, as the SDK sends its own) `lie_after`
  // seconds in, while the task still works; really completes after `seconds`.
  taskTool(server, 'lying_echo', {
    description: 'Echoes text after `seconds`, after claiming completion by notification at `lie_after`.',
    inputSchema: { seconds: z.number().default(6), lie_after: z.number().default(2), text: z.string().default('hello') },
    taskSupport: 'optional'
  }, async (a, taskId, extra) => {
    if (!(await work(taskId, a.lie_after * 1000))) return;
    const task = await extra.taskStore.getTask(taskId);
    await server.server.notification({ method: 'notifications/tasks/status', params: { ...task, status: 'completed' } });
    logEvent({ event: 'lie', taskId, status: 'completed' });
    return (await work(taskId, (a.seconds - a.lie_after) * 1000)) && ['completed', text(a.text)];
  });

  // Sends `count` notifications/tasks/status for task ids this server never made (`flood-<n>`, status
  // `completed`, each `pad` bytes of statusMessage), as fast as it can, then completes after `seconds`.
  taskTool(server, 'notify_flood', {
    description: 'Floods the session with task notifications for unknown task ids, then completes after `seconds`.',
    inputSchema: { count: z.number().default(10000), seconds: z.number().default(4), pad: z.number().default(0) },
    taskSupport: 'optional'
  }, async (a, taskId, extra) => {
    if (!(await work(taskId, 500))) return;
    const base = await extra.taskStore.getTask(taskId);
    const statusMessage = 'x'.repeat(Math.max(0, a.pad));
    logEvent({ event: 'flood_start', taskId, count: a.count });
    for (let i = 0; i < a.count; i++) {
      await server.server.notification({ method: 'notifications/tasks/status',
        params: { ...base, taskId: `flood-${i}-${taskId}`, status: 'completed', statusMessage } });
    }
    logEvent({ event: 'flood_end', taskId, count: a.count });
    return (await work(taskId, Math.max(0, a.seconds * 1000 - 500))) && ['completed', text('after the flood')];
  });

  taskTool(server, 'rate_limited', { description: 'Fails like an upstream HTTP 429.', taskSupport: 'required' },
    async (_a, taskId) => (await work(taskId, 200)) &&
      ['failed', { ...text('HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30'), isError: true }]);

  taskTool(server, 'rpc_error', { description: 'Fails with a JSON-RPC error.', taskSupport: 'optional' },
    async (_a, taskId) => {
      const message = 'invalid account id: acct-0';
      return (await work(taskId, 200)) &&
        ['failed', { ...text(message), isError: true, _meta: { [RPC_ERROR_META]: { code: -32602, message } } }];
    });

  // A large result: `marker` then `kb` KiB of filler (tests/test_external_storage.py: a result over Temporal's
  // payload limits, claim-checked to the payload store).
  taskTool(server, 'big_echo', {
    description: 'Answers `marker` followed by `kb` KiB of filler after `seconds`.',
    inputSchema: { kb: z.number().default(5120), seconds: z.number().default(0.2), marker: z.string().default('big') },
    taskSupport: 'optional'
  }, async (a, taskId) => (await work(taskId, a.seconds * 1000)) &&
    ['completed', text(a.marker + '.'.repeat(Math.min(Math.max(0, a.kb), 16384) * 1024))]);

  taskTool(server, 'required_echo', {
    description: 'Echoes text; task-only.',
    inputSchema: { text: z.string().default('hello') },
    taskSupport: 'required'
  }, async (a, taskId) => (await work(taskId, 100)) && ['completed', text(a.text)]);

  taskTool(server, 'cancellable', {
    description: 'Works for `seconds` unless cancelled.',
    inputSchema: { seconds: z.number().default(60) },
    taskSupport: 'optional',
    statusMessage: () => 'working'
  }, async (a, taskId) => (await work(taskId, a.seconds * 1000)) && ['completed', text(`finished after ${a.seconds}s`)]);

  // Declared task-capable; task-augmented calls are answered before the SDK sees them (see
  // intercept()). Plain calls go through the SDK (which runs a task internally and waits).
  taskTool(server, 'plain_fallback', {
    description: 'Ignores params.task and answers a plain CallToolResult.',
    inputSchema: { text: z.string().default('hello') },
    taskSupport: 'optional'
  }, async a => ['completed', text(a.text)]);

  // The elicitation goes through the SDK's task runtime: with relatedTask set, the request is
  // queued in the taskMessageQueue (not sent), the SDK flips the task to input_required, and
  // the next tasks/result call delivers it on its own response stream; the answer comes back
  // as an ordinary JSON-RPC response and resolves this promise.
  taskTool(server, 'ask_user', {
    description: 'Asks the user through elicitation/create related to the task, after `delay` seconds.',
    inputSchema: { question: z.string().default('Approve payment of 10 EUR?'), delay: z.number().default(0) },
    taskSupport: 'required'
  }, async (a, taskId, extra) => {
    if (a.delay > 0 && !(await work(taskId, a.delay * 1000))) return;
    logEvent({ event: 'input_required', taskId });
    let answer;
    try {
      answer = await extra.sendRequest({
        method: 'elicitation/create',
        params: {
          message: a.question,
          requestedSchema: {
            type: 'object',
            properties: { account: { type: 'string' }, approve: { type: 'boolean' } },
            required: ['approve']
          }
        }
      }, ElicitResultSchema, { relatedTask: { taskId }, timeout: ELICIT_TIMEOUT_MS });
    } catch (err) {
      return stillRunning(taskId) && ['failed', { ...text(`elicitation failed: ${err.message}`), isError: true }];
    }
    if (!stillRunning(taskId)) return;
    await extra.taskStore.updateTaskStatus(taskId, 'working'); // the SDK does not flip it back
    if (answer.action === 'cancel') return ['completed', { ...text('cancelled by user'), isError: true }];
    if (answer.action === 'accept' && answer.content?.approve === true) {
      return ['completed', text(`approved account=${answer.content.account}`)];
    }
    return ['completed', text('declined')];
  });

  // Asks the client's model through sampling/createMessage related to the task; reports what came back.
  taskTool(server, 'ask_model', {
    description: 'Requests sampling/createMessage related to the task and reports the answer or refusal.',
    inputSchema: { prompt: z.string().default('Summarise the build log') },
    taskSupport: 'required'
  }, async (a, taskId, extra) => {
    try {
      const res = await extra.sendRequest({
        method: 'sampling/createMessage',
        params: { messages: [{ role: 'user', content: { type: 'text', text: a.prompt } }], maxTokens: 50 }
      }, CreateMessageResultSchema, { relatedTask: { taskId }, timeout: ELICIT_TIMEOUT_MS });
      if (!stillRunning(taskId)) return;
      return ['completed', text(`model said: ${res.content?.text ?? ''}`)];
    } catch (err) {
      return stillRunning(taskId) && ['completed', text(`sampling refused: ${err.message}`)];
    }
  });

  server.registerTool('forbidden_tool', { description: 'Plain synchronous tool.', inputSchema: {} },
    async () => text('sync ok'));
  // A synchronous call whose reply takes a while: lets a test kill a worker after tools/call was sent
  // and before its reply arrived (the "unknown outcome" case).
  server.registerTool('slow_sync', { description: 'Plain synchronous tool that answers after `seconds`.',
    inputSchema: { seconds: z.number().default(3) } },
    async ({ seconds }) => { await new Promise(r => setTimeout(r, seconds * 1000)); return text(`slept ${seconds}s`); });
  // Protocol-level trouble (e.g. a reply for a tasks/result stream the client dropped) is
  // otherwise silent; stderr is never the protocol channel.
  server.server.onerror = err => process.stderr.write(`[peer] ${err.message}\n`);
  // A plain (non-task) tool that closes its SSE stream `closes` times, `seconds` apart, then answers: the client
  // must resume the stream (GET + Last-Event-ID) each time. Needs PEER_RETRY_MS (an event store); otherwise it
  // just answers after closes × seconds.
  server.registerTool('cycling_sync', { description: 'Plain tool that closes its SSE stream before answering.',
    inputSchema: { seconds: z.number().default(0.5), closes: z.number().default(1) } },
    async ({ seconds, closes }, extra) => {
      for (let i = 0; i < closes; i++) {
        await new Promise(r => setTimeout(r, seconds * 1000));
        extra.closeSSEStream?.();
      }
      await new Promise(r => setTimeout(r, seconds * 1000));
      return text(`answered after ${closes} closed streams`);
    });
  // A plain (non-task) tool that asks through elicitation/create on its own tools/call stream (form mode, with
  // SEP-1034 defaults) and answers with what came back.
  server.registerTool('ask_plain', { description: 'Plain tool that elicits a form on its tools/call stream.',
    inputSchema: { broken: z.boolean().default(false) } },
    async ({ broken }, extra) => {
      const requestedSchema = broken ? { type: 'object', properties: { x: { type: 'no-such-type' } } }
        : { type: 'object', properties: {
          name: { type: 'string', default: 'John Doe' }, age: { type: 'integer', default: 30 },
          ok: { type: 'boolean', description: 'approve?' } }, required: ['ok'] };
      try {
        const res = await extra.sendRequest({ method: 'elicitation/create', params: {
          message: 'Approve the plain call?', requestedSchema } }, ElicitResultSchema, { timeout: ELICIT_TIMEOUT_MS });
        return text(JSON.stringify(res));
      } catch (err) {
        return { ...text(`elicitation failed: ${err.message}`), isError: true };
      }
    });
  // Whose token the call came with: the `sub` the authorization server's introspection gave for it (PEER_AUTH_ISSUER),
  // after `seconds`, so a task may outlive the token it was called with.
  taskTool(server, 'whoami', { description: 'The subject of the bearer token this call came with.',
    inputSchema: { seconds: z.number().default(0) }, taskSupport: 'optional' },
  async ({ seconds }, taskId, extra) => {
    const sub = extra.authInfo?.extra?.sub ?? null;
    return (await work(taskId, seconds * 1000)) && ['completed', { ...text(`subject=${sub ?? ''}`), structuredContent: { subject: sub } }];
  });
  server.registerTool('counter', { description: 'tools/call count per tool name in this process.', inputSchema: {} },
    async () => text(JSON.stringify(callCounts)));
  registerJobTools(server);
  return server;
}

// Wraps the transport's onmessage after connect() so every message is seen before the SDK:
// logs requests and answers a task-augmented plain_fallback call itself.
function intercept(transport) {
  const sdkOnMessage = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    if (msg && typeof msg === 'object' && 'method' in msg && 'id' in msg) {
      const p = msg.params ?? {};
      const tool = msg.method === 'tools/call' ? (p.name ?? null) : null;
      if (tool !== null) callCounts[tool] = (callCounts[tool] ?? 0) + 1;
      if (PEER_LOG) {
        const taskId = msg.method.startsWith('tasks/') ? (p.taskId ?? null) : null;
        appendFileSync(PEER_LOG, JSON.stringify({
          ts: Date.now(), pid: process.pid, method: msg.method, id: msg.id, tool,
          task: tool !== null && p.task !== undefined,
          taskId,
          statusAtReceipt: taskId ? taskStore.peekStatus(taskId) : null,
          session: transport.sessionId ?? null,
          traceparent: p._meta?.traceparent ?? null
        }) + '\n');
      }
      if (tool === 'plain_fallback' && p.task !== undefined) {
        const result = text(p.arguments?.text ?? 'hello');
        transport.send({ jsonrpc: '2.0', id: msg.id, result })
          .catch(err => process.stderr.write(`[peer] plain_fallback: ${err.message}\n`));
        return;
      }
    }
    sdkOnMessage?.(msg, extra);
  };
}

async function serveStdio() {
  const transport = new StdioServerTransport();
  await buildServer().connect(transport);
  intercept(transport);
  // The pending TTL timers would otherwise keep a server whose client went away alive.
  process.stdin.on('end', () => process.exit(0));
  process.stderr.write('LISTENING stdio\n');
}

function jsonError(res, status, code, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' })
    .end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return undefined;
  }
}

// The MCP endpoint behind the SDK's bearer-token middleware, as a real protected resource would run it.
async function protectedApp(resourceUrl, serve) {
  const { default: express } = await import('express');
  const { requireBearerAuth } = await import('@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js');
  const { mcpAuthMetadataRouter, getOAuthProtectedResourceMetadataUrl } =
    await import('@modelcontextprotocol/sdk/server/auth/router.js');
  const { InvalidTokenError } = await import('@modelcontextprotocol/sdk/server/auth/errors.js');
  const issuer = process.env.PEER_AUTH_ISSUER;
  const metadata = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
  const basic = Buffer.from(`${process.env.PEER_AUTH_CLIENT_ID}:${process.env.PEER_AUTH_CLIENT_SECRET}`).toString('base64');
  const verifier = {
    async verifyAccessToken(token) {
      const reply = await fetch(metadata.introspection_endpoint, {
        method: 'POST',
        headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token })
      });
      const info = await reply.json();
      if (!info.active) throw new InvalidTokenError('token is not active');
      return { token, clientId: info.client_id, scopes: (info.scope ?? '').split(' ').filter(Boolean),
               expiresAt: info.exp, resource: info.aud, extra: { sub: info.sub ?? null } };
    }
  };
  const app = express();
  app.use(mcpAuthMetadataRouter({ oauthMetadata: metadata, resourceServerUrl: resourceUrl, scopesSupported: ['mcp:tools'] }));
  app.use('/mcp', express.json({ limit: '64mb' }), (req, res, next) => {
    res.on('finish', () => {
      if (PEER_LOG && (res.statusCode === 401 || res.statusCode === 403)) {
        appendFileSync(PEER_LOG, JSON.stringify({ ts: Date.now(), pid: process.pid, denied: res.statusCode,
          deniedMethod: req.body?.method ?? null, tool: req.body?.params?.name ?? null }) + '\n');
      }
    });
    next();
  }, requireBearerAuth({ verifier, requiredScopes: ['mcp:tools'], expectedResource: resourceUrl,
                          resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(resourceUrl) }));
  app.use((req, res) => serve(req, res));
  return app;
}

async function serveHttp() {
  const sessions = new Map(); // stateful: mcp-session-id -> transport

  const handle = async (req, res) => {
    if (new URL(req.url, 'http://127.0.0.1').pathname !== '/mcp') return jsonError(res, 404, -32000, 'Not found');
    // In auth mode express has parsed the body already (to log which method a refusal was for).
    const body = req.method === 'POST' ? (req.body !== undefined ? req.body : await readJson(req)) : undefined;
    if (req.method === 'POST' && body === undefined) return jsonError(res, 400, -32700, 'Parse error: Invalid JSON');

    if (opts.stateless) {
      // The SDK forbids reusing a stateless transport, hence a server per request.
      if (req.method !== 'POST') return jsonError(res, 405, -32000, 'Method not allowed.');
      const server = buildServer();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => { transport.close(); server.close(); });
      await server.connect(transport);
      intercept(transport);
      return transport.handleRequest(req, res, body);
    }

    const sid = req.headers['mcp-session-id'];
    // The standalone GET streams asked for (the SDK answers a second one for a session with 409).
    if (req.method === 'GET') logEvent({ event: 'get_stream', session: sid ?? null, lastEventId: req.headers['last-event-id'] ?? null });
    let transport = sid ? sessions.get(sid) : undefined;
    if (sid && !transport) return jsonError(res, 404, -32001, 'Session not found');
    if (!transport) {
      const isInit = req.method === 'POST' && (Array.isArray(body) ? body.some(isInitializeRequest) : isInitializeRequest(body));
      if (!isInit) return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        onsessioninitialized: id => sessions.set(id, transport),
        ...(RETRY_MS !== undefined ? { eventStore: new InMemoryEventStore(), retryInterval: Number(RETRY_MS) } : {})
      });
      transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
      await buildServer().connect(transport);
      intercept(transport);
    }
    return transport.handleRequest(req, res, body);
  };

  const serve = (req, res) => {
    handle(req, res).catch(err => {
      process.stderr.write(`[peer] http: ${err.stack}\n`);
      if (!res.headersSent) jsonError(res, 500, -32603, 'Internal server error');
    });
  };
  const http = createServer();
  await new Promise(resolve => http.listen(Number(opts.port), '127.0.0.1', resolve));
  http.on('request', process.env.PEER_AUTH_ISSUER
    ? await protectedApp(new URL(`http://127.0.0.1:${http.address().port}/mcp`), serve)
    : serve);
  process.stderr.write(`LISTENING http://127.0.0.1:${http.address().port}/mcp\n`);
}

if (opts.transport === 'stdio') await serveStdio();
else if (opts.transport === 'http') await serveHttp();
else {
  process.stderr.write(`unknown --transport ${opts.transport}\n`);
  process.exit(2);
}
