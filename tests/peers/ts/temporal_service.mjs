// A TypeScript service (the Temporal TypeScript SDK's client, @temporalio/client) that starts McpTaskWorkflow on a
// worker of ours with a plain JSON request and prints the outcome it reads back as one JSON line.
//
//   node temporal_service.mjs '{"address":"localhost:7233","taskQueue":"mcp-tasks","workflowId":"ts-1",
//                               "request":{...McpTaskRequest...},"s3":{"endpoint":"http://...","region":"us-east-1"}}'
//
// The request is a plain object: the TS SDK's default payload converter sends it as `json/plain`, which our pydantic
// JSON converter reads (docs/schemas/McpTaskRequest.json says its shape). With `s3`, large payloads stored by our
// workers in an S3-compatible bucket (Temporal's External Storage, claims of `aws.s3driver`) are read back: the TS SDK
// 1.24.0 carries External Storage in its data converter but ships no S3 driver, so this is a small one over aws4fetch
// (SigV4) that reads the claims the Python and Go S3 drivers write (bucket, key, sha256 of the stored bytes).
// Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
import { createHash } from 'node:crypto';
import { Client, Connection, WorkflowFailedError } from '@temporalio/client';
import { ExternalStorage } from '@temporalio/common';
import proto from '@temporalio/proto';
import { AwsClient } from 'aws4fetch';

const Payload = proto.temporal.api.common.v1.Payload;

class S3ClaimReader {
  constructor({ endpoint, region }) {
    this.name = 'aws.s3driver';
    this.type = 'aws.s3driver';
    this.endpoint = endpoint.replace(/\/$/, '');
    this.aws = new AwsClient({ accessKeyId: process.env.AWS_ACCESS_KEY_ID, secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY,
      region, service: 's3' });
  }

  async store() {
    throw new Error('this service only reads stored payloads');
  }

  async retrieve(_context, claims) {
    return Promise.all(claims.map(async claim => {
      const { bucket, key, hash_value: digest } = claim.claimData;
      const url = `${this.endpoint}/${encodeURIComponent(bucket)}/${key.split('/').map(encodeURIComponent).join('/')}`;
      const res = await this.aws.fetch(url);
      if (!res.ok) throw new Error(`S3 bucket ${bucket}: GET ${key} answered HTTP ${res.status}`);
      const bytes = new Uint8Array(await res.arrayBuffer());
      const actual = createHash('sha256').update(bytes).digest('hex');
      if (actual !== digest) throw new Error(`S3 bucket ${bucket}: ${key} digest mismatch (${actual} != ${digest})`);
      return Payload.decode(bytes);
    }));
  }
}

const spec = JSON.parse(process.argv[2]);
const connection = await Connection.connect({ address: spec.address });
const dataConverter = spec.s3 ? { externalStorage: new ExternalStorage({ drivers: [new S3ClaimReader(spec.s3)] }) } : undefined;
const client = new Client({ connection, namespace: spec.namespace ?? 'default', dataConverter });
try {
  const handle = await client.workflow.start('McpTaskWorkflow', {
    taskQueue: spec.taskQueue, workflowId: spec.workflowId, args: [spec.request]
  });
  let outcome;
  try {
    outcome = await handle.result();
  } catch (err) {
    // Every outcome but `completed` fails the workflow with McpTaskError, the outcome in its details.
    if (!(err instanceof WorkflowFailedError) || !err.cause?.details?.length) throw err;
    outcome = err.cause.details[0];
  }
  const text = outcome.result?.content?.[0]?.text ?? '';
  console.log(JSON.stringify({ workflowId: handle.workflowId, outcome: outcome.outcome, taskId: outcome.task_id,
    resultChars: text.length, resultStart: text.slice(0, 40), operationAttempts: outcome.operation_attempts?.length }));
} finally {
  await connection.close();
}
