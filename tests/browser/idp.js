// A real OpenID Connect provider for the portal's single sign-on tests: the `oidc-provider`
// package (npm), certified by the OpenID Foundation, with its development login pages.
//
//   PORT=<port> node tests/browser/idp.js     # issuer http://127.0.0.1:<port>
//
// Configured as a company's provider would be for modelplane's portal: one public client
// (`modelplane-portal`, Authorization Code with PKCE, no secret) redirecting to REDIRECT
// (the portal's `/auth/callback`), a `groups` claim, and refresh tokens. Tokens are short
// (TOKEN_TTL seconds, 20 by default), so a test sees them refreshed. Its users:
// - `alice`, in groups `ml-viewers` and `ml-editors`;
// - `bob`, in no group.
// Any password signs in (the development login page); the account name is what counts.
const Provider = require('oidc-provider').default ?? require('oidc-provider');

const PORT = Number(process.env.PORT);
const REDIRECT = process.env.REDIRECT;
const POST_LOGOUT = process.env.POST_LOGOUT;
const TTL = Number(process.env.TOKEN_TTL || 20);
if (!PORT || !REDIRECT || !POST_LOGOUT) throw new Error('PORT, REDIRECT and POST_LOGOUT must be set');

const USERS = {
  alice: { name: 'Alice Example', groups: ['ml-viewers', 'ml-editors'] },
  bob: { name: 'Bob Example', groups: [] },
};

const issuer = `http://127.0.0.1:${PORT}`;
const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'modelplane-portal',
      token_endpoint_auth_method: 'none',
      application_type: 'web',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: [REDIRECT],
      post_logout_redirect_uris: [POST_LOGOUT],
    },
  ],
  claims: { openid: ['sub'], profile: ['name'], groups: ['groups'] },
  // The groups claim in the ID token, which is what the portal sends the API.
  conformIdTokenClaims: false,
  async findAccount(_ctx, id) {
    const user = USERS[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, name: user.name, groups: user.groups };
      },
    };
  },
  // Refresh tokens for the portal without `offline_access` (they end with the provider's
  // session, oidc-provider's default for such tokens), as company providers commonly do.
  async issueRefreshToken(_ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  ttl: { IdToken: TTL, AccessToken: TTL, AuthorizationCode: 60, RefreshToken: 3600, Session: 3600, Grant: 3600, Interaction: 600 },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  pkce: { required: () => true },
});
provider.proxy = false;
provider.listen(PORT, '127.0.0.1', () => console.error(`oidc-provider at ${issuer}`));
