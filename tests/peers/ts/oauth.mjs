// Test peer: a real OAuth 2.x authorization server (panva's oidc-provider, certified OpenID provider) for
// the machine-to-machine MCP authorization tests: client_credentials with client_secret_basic/_post or
// private_key_jwt, RFC 8707 resource indicators (tokens bound to the MCP server), introspection (how the
// MCP peer checks tokens) and revocation (how a test makes a token the worker still holds stale).
//
//   node oauth.mjs --port P
//
// Env (JSON or plain strings):
//   OAUTH_CLIENTS   JSON array of client metadata (client_id, client_secret or jwks, token_endpoint_auth_method)
//   OAUTH_TOKEN_TTL_S   access token lifetime (default 600)
//   OAUTH_LOG       /path.jsonl: one line per issued token ({ts, client, ttl}), never the token itself
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import Provider from 'oidc-provider';

const { values: opts } = parseArgs({ options: { port: { type: 'string', default: '0' } } });
const TTL_S = Number(process.env.OAUTH_TOKEN_TTL_S ?? 600);
const LOG = process.env.OAUTH_LOG;
const clients = JSON.parse(process.env.OAUTH_CLIENTS ?? '[]').map(c => ({
  grant_types: ['client_credentials'], response_types: [], redirect_uris: [], ...c
}));

const http = createServer();
await new Promise(resolve => http.listen(Number(opts.port), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${http.address().port}`;

const provider = new Provider(issuer, {
  clients,
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A token is for exactly the MCP server the client named (RFC 8707): the peer checks its audience.
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => ({
        audience: resource,
        scope: 'mcp:tools',
        accessTokenTTL: TTL_S,
        accessTokenFormat: 'opaque'
      })
    }
  },
  // The process lives as long as one test module: ephemeral signing keys are fine.
  cookies: { keys: ['test-only-cookie-key'] }
});

provider.on('client_credentials.saved', token => {
  if (LOG) appendFileSync(LOG, JSON.stringify({ ts: Date.now(), client: token.clientId, ttl: token.expiresIn }) + '\n');
});
provider.on('server_error', (_ctx, err) => process.stderr.write(`[oauth] server_error: ${err.stack}\n`));
provider.on('grant.error', (_ctx, err) => process.stderr.write(`[oauth] grant.error: ${err.message}: ${err.error_description ?? ''}\n`));

http.on('request', provider.callback());
process.stderr.write(`LISTENING ${issuer}\n`);
