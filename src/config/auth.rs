//! Who the caller is and what goes upstream in its name: the identity header, bearer
//! JWTs and their scopes, and the upstream credential (`settings::auth`,
//! `settings::upstream_credential`).

use crate::config::ConfigError;

#[derive(Debug, Clone, clap::Args)]
pub struct AuthConfig {
    /// Header whose value identifies the caller; tasks are bound to it. Without it,
    /// the caller is identified by a hash of the `Authorization` header.
    #[arg(long, env = "MTG_IDENTITY_HEADER")]
    pub identity_header: Option<http::HeaderName>,

    /// Issuer of the bearer JWTs the gateway accepts: with it set, every `/mcp` request
    /// needs a valid token (the gateway is an OAuth 2.1 resource server), and tasks
    /// belong to the token's (issuer, subject). Its keys come from
    /// `--auth-jwt-jwks-url`, else from its metadata (RFC 8414 / OpenID discovery).
    #[arg(long, env = "MTG_AUTH_JWT_ISSUER", requires = "auth_jwt_audience")]
    pub auth_jwt_issuer: Option<String>,

    /// The gateway's resource URI (RFC 8707), e.g. `https://mcp.example.com/mcp`: tokens
    /// must name it in `aud`; the protected resource metadata says it is the resource.
    #[arg(long, env = "MTG_AUTH_JWT_AUDIENCE", requires = "auth_jwt_issuer")]
    pub auth_jwt_audience: Option<String>,

    /// The issuer's JSON Web Key Set URL (default: found through the issuer's metadata).
    #[arg(long, env = "MTG_AUTH_JWT_JWKS_URL", requires = "auth_jwt_issuer")]
    pub auth_jwt_jwks_url: Option<String>,

    /// Signature algorithms accepted (comma-separated). `none` and HMAC are refused.
    #[arg(long, env = "MTG_AUTH_JWT_ALGORITHMS", value_delimiter = ',',
          default_value = "RS256,RS384,RS512,PS256,PS384,PS512,ES256,ES384,EdDSA",
          value_parser = crate::auth::parse_algorithm)]
    pub auth_jwt_algorithms: Vec<jsonwebtoken::Algorithm>,

    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    #[arg(long, env = "MTG_AUTH_JWT_LEEWAY_S", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(..=300))]
    pub auth_jwt_leeway_s: u64,

    /// A scope every `tools/call` needs (repeatable; comma-separated in the environment).
    #[arg(
        long = "auth-scope-tools-call",
        env = "MTG_AUTH_SCOPES_TOOLS_CALL",
        value_delimiter = ',',
        requires = "auth_jwt_issuer"
    )]
    pub auth_scopes_tools_call: Vec<String>,

    /// A scope every `tasks/*` request needs (repeatable; comma-separated in the
    /// environment).
    #[arg(
        long = "auth-scope-tasks",
        env = "MTG_AUTH_SCOPES_TASKS",
        value_delimiter = ',',
        requires = "auth_jwt_issuer"
    )]
    pub auth_scopes_tasks: Vec<String>,

    /// What the gateway sends upstream as `Authorization`: `client` (the caller's own
    /// header, as it came), `none`, or `static` (the value in
    /// `--upstream-credential-file`, e.g. `Bearer <service token>`).
    #[arg(long, env = "MTG_UPSTREAM_CREDENTIAL", default_value = "client",
          value_parser = ["client", "none", "static"])]
    pub upstream_credential: String,

    /// File holding the `Authorization` value for `--upstream-credential static`; read
    /// once at start, surrounding whitespace ignored.
    #[arg(long, env = "MTG_UPSTREAM_CREDENTIAL_FILE")]
    pub upstream_credential_file: Option<std::path::PathBuf>,
}

impl AuthConfig {
    /// `--upstream-credential-file` goes with `--upstream-credential static`, and only
    /// with it.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        match (
            self.upstream_credential.as_str(),
            &self.upstream_credential_file,
        ) {
            ("static", None) => Err(ConfigError::Inconsistent(
                "--upstream-credential static needs --upstream-credential-file".into(),
            )),
            ("client" | "none", Some(_)) => Err(ConfigError::Inconsistent(
                "--upstream-credential-file is only read with --upstream-credential static".into(),
            )),
            _ => Ok(()),
        }
    }
}
