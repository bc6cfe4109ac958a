// Test peer: a real authorization server for a subject's authorization-code grant (panva's oidc-provider) with
// refresh-token rotation, short-lived access tokens and RFC 8707 resource indicators. Its "person" consents at once:
// the interaction signs in the account named by `login_hint` and grants what was asked (no page to fill in).
//
//   node oauth_user.mjs --port P
//
// Env:
//   OAUTH_CLIENTS      JSON array of client metadata (public clients: token_endpoint_auth_method "none")
//   OAUTH_TOKEN_TTL_S  access token lifetime (default 20)
//   OAUTH_LOG          /path.jsonl: one line per token-endpoint outcome ({ts, grant_type, ok, error, description,
//                      account, grant, rt}), never a token: `grant` is oidc-provider's grant id, `rt` the first 16 hex
//                      of the SHA-256 of the refresh token presented (the same `rt` on two lines: a refresh token
//                      used twice). A rotated refresh token presented twice shows as invalid_grant here, and
//                      oidc-provider's own `refresh_token.consumed` / `grant.revoked` events as {event, grant, rt}.
//   OAUTH_ISSUED       /path.jsonl (test only): every access and refresh token the server hands out, in clear, so a
//                      test can search for them elsewhere ({ts, grant, access_token, refresh_token}).
//   Introspection (RFC 7662) is on: an MCP server checks tokens as a confidential client listed in OAUTH_CLIENTS.
import { createHash } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import Provider from 'oidc-provider';

const { values: opts } = parseArgs({ options: { port: { type: 'string', default: '0' } } });
const TTL_S = Number(process.env.OAUTH_TOKEN_TTL_S ?? 20);
const LOG = process.env.OAUTH_LOG;
const ISSUED = process.env.OAUTH_ISSUED;
const log = entry => { if (LOG) appendFileSync(LOG, JSON.stringify({ ts: Date.now(), ...entry }) + '\n'); };
const digest = token => typeof token === 'string' ? createHash('sha256').update(token).digest('hex').slice(0, 16) : null;
const clients = JSON.parse(process.env.OAUTH_CLIENTS ?? '[]').map(c => ({
  grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none',
  ...c
}));

const http = createServer();
await new Promise(resolve => http.listen(Number(opts.port), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${http.address().port}`;

const provider = new Provider(issuer, {
  clients,
  scopes: ['openid', 'offline_access', 'mcp:tools'],
  features: {
    devInteractions: { enabled: false },
    // A protected MCP server (server.mjs with PEER_AUTH_ISSUER) checks a subject's token here, as a confidential client.
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => ({
        audience: resource, scope: 'mcp:tools', accessTokenTTL: TTL_S, accessTokenFormat: 'opaque'
      })
    }
  },
  // Every refresh is rotated, and a rotated one presented again revokes the grant (oidc-provider's reuse detection).
  rotateRefreshToken: true,
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  ttl: { AccessToken: TTL_S, RefreshToken: 3600, Grant: 3600, Interaction: 600, Session: 3600, AuthorizationCode: 60 },
  interactions: { url: async (_ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['test-only-cookie-key'] }
});

// The grant a token request was for: the refresh token's, or the authorization code's.
const grantOf = ctx => ctx.oidc?.entities?.Grant?.jti ?? ctx.oidc?.entities?.RefreshToken?.grantId
  ?? ctx.oidc?.entities?.AuthorizationCode?.grantId ?? null;
provider.on('grant.success', ctx => {
  const grant = grantOf(ctx);
  log({
    grant_type: ctx.oidc.params.grant_type, ok: true, account: ctx.oidc.entities.Account?.accountId ?? null, grant,
    rt: digest(ctx.oidc.params.refresh_token)
  });
  if (ISSUED) {
    appendFileSync(ISSUED, JSON.stringify({
      ts: Date.now(), grant, access_token: ctx.body?.access_token ?? null, refresh_token: ctx.body?.refresh_token ?? null
    }) + '\n');
  }
});
provider.on('grant.error', (ctx, err) => log({
  grant_type: ctx.oidc?.params?.grant_type ?? null, ok: false, error: err.error ?? String(err.message),
  description: err.error_description ?? null, account: ctx.oidc?.entities?.Account?.accountId ?? null,
  grant: grantOf(ctx), rt: digest(ctx.oidc?.params?.refresh_token)
}));
provider.on('refresh_token.consumed', token => log({ event: 'refresh_token.consumed', grant: token.grantId }));
provider.on('grant.revoked', (_ctx, grantId) => log({ event: 'grant.revoked', grant: grantId }));
provider.on('server_error', (_ctx, err) => process.stderr.write(`[oauth_user] server_error: ${err.stack}\n`));

// The person: signs in as login_hint, then grants the scopes and the resource asked for.
http.on('request', async (req, res) => {
  const m = /^\/interaction\/([^/?]+)/.exec(req.url);
  if (!m) return provider.callback()(req, res);
  try {
    const details = await provider.interactionDetails(req, res);
    const { prompt, params } = details;
    if (prompt.name === 'login') {
      const accountId = String(params.login_hint ?? '');
      if (!accountId) throw new Error('no login_hint: the person does not know who to sign in as');
      return await provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
    }
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    for (const [resource, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
      grant.addResourceScope(resource, scopes.join(' '));
    }
    const grantId = await grant.save();
    return await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  } catch (err) {
    process.stderr.write(`[oauth_user] interaction: ${err.message}\n`);
    res.statusCode = 400;
    res.end(String(err.message));
  }
});
process.stderr.write(`LISTENING ${issuer}\n`);
