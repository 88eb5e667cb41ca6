//! The operator's console: pages at `/admin/ui` on the admin listener, on whenever the
//! admin API is. Signed in with the admin token (`session.rs`), a browser gets the
//! overview, the task table and each task's page, drawn by one hand-written script
//! (`assets/`) from the console's JSON (`api.rs`); a cancel goes the admin API's way.
//!
//! Every response carries the headers of `headers.rs`; every change (cancel, sign-out)
//! needs the session's CSRF token (`csrf.rs`).

mod api;
mod assets;
mod csrf;
mod detail;
mod headers;
mod listing;
mod overview;
mod pages;
mod session;
mod views;
mod world;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use subtle::ConstantTimeEq;

pub use detail::SHOWN_CAP;
pub use world::WorldView;

use api::ApiError;
use pages::View;
use session::Sessions;

type Reply = Response<Full<Bytes>>;

/// Largest form body read (sign-in, sign-out).
const MAX_FORM_BYTES: usize = 4096;

pub struct ConsoleSettings {
    /// `--admin-session-ttl-ms`.
    pub session_ttl: Duration,
    /// `--admin-show-results`.
    pub show_results: bool,
    /// Whether the listener serves TLS, so the cookie may be `Secure`.
    pub tls: bool,
    /// This instance's id and lease timeout (for the age of each instance's lease).
    pub instance_id: String,
    pub lease_ttl: Duration,
}

pub struct Console {
    settings: ConsoleSettings,
    token: String,
    sessions: Sessions,
    worlds: Vec<WorldView>,
}

impl Console {
    pub fn new(settings: ConsoleSettings, token: String, worlds: Vec<WorldView>) -> Self {
        Self {
            sessions: Sessions::new(settings.session_ttl),
            settings,
            token,
            worlds,
        }
    }

    /// Answers a request under `/admin/ui`.
    pub async fn serve(&self, request: Request<Incoming>) -> Reply {
        headers::secure(self.route(request).await)
    }

    async fn route(&self, request: Request<Incoming>) -> Reply {
        let path = request.uri().path().to_owned();
        let rest = path.strip_prefix("/admin/ui").unwrap_or_default();
        let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        let method = request.method().clone();
        match (&method, segments.as_slice()) {
            (&Method::GET, ["assets", name]) => {
                return assets::serve(name).unwrap_or_else(|| ApiError::NotFound.reply());
            }
            (&Method::POST, ["sign-in"]) => return self.sign_in(request).await,
            _ => {}
        }
        let Some(session) = self.sessions.find(request.headers()) else {
            return match (&method, segments.first()) {
                (&Method::GET, None) => pages::sign_in(false),
                (&Method::GET, Some(first)) if *first != "api" => see_other("/admin/ui"),
                _ => ApiError::SignedOut.reply(),
            };
        };
        let query = request.uri().query().unwrap_or_default().to_owned();
        let outcome = match (&method, segments.as_slice()) {
            (&Method::GET, []) => Ok(pages::app(View::Overview, &session.csrf)),
            (&Method::GET, ["tasks"]) => Ok(pages::app(View::Tasks, &session.csrf)),
            (&Method::GET, ["tasks", _]) => Ok(pages::app(View::Task, &session.csrf)),
            (&Method::POST, ["sign-out"]) => self.sign_out(request, &session.csrf).await,
            (&Method::GET, ["api", "overview"]) => api::overview(self).await,
            (&Method::GET, ["api", "upstreams"]) => api::upstreams(self),
            (&Method::GET, ["api", "tasks"]) => api::tasks(self, &query).await,
            (&Method::GET, ["api", "tasks", task_id]) => api::task(self, task_id, &query).await,
            (&Method::POST, ["api", "tasks", task_id, "cancel"]) => {
                let given = request
                    .headers()
                    .get(csrf::HEADER)
                    .and_then(|value| value.to_str().ok());
                match csrf::check(&session.csrf, given) {
                    Ok(()) => api::cancel(self, task_id, &query).await,
                    Err(e) => Err(e.into()),
                }
            }
            (_, [] | ["tasks"] | ["tasks", _] | ["api", ..]) => Err(ApiError::Method),
            _ => Err(ApiError::NotFound),
        };
        outcome.unwrap_or_else(ApiError::reply)
    }

    /// A right token opens a session; a wrong one gets the form again, saying so.
    async fn sign_in(&self, request: Request<Incoming>) -> Reply {
        #[derive(serde::Deserialize)]
        struct SignIn {
            token: String,
        }
        let form: SignIn = match read_form(request).await {
            Ok(form) => form,
            Err(e) => return e.reply(),
        };
        // Constant time: the token must not leak a byte at a time through timing.
        let right: bool = form
            .token
            .trim()
            .as_bytes()
            .ct_eq(self.token.as_bytes())
            .into();
        if !right {
            tracing::warn!("console: a sign-in with a wrong token was refused");
            return pages::sign_in(true);
        }
        let opened = match self.sessions.open() {
            Ok(cookie) => cookie,
            Err(e) => return ApiError::Internal(e.to_string()).reply(),
        };
        tracing::info!("console: an operator signed in");
        let cookie = session::set_cookie(&opened, self.sessions.ttl(), self.settings.tls);
        with_cookie(see_other("/admin/ui"), &cookie)
    }

    async fn sign_out(&self, request: Request<Incoming>, csrf: &str) -> Result<Reply, ApiError> {
        #[derive(serde::Deserialize)]
        struct SignOut {
            csrf: Option<String>,
        }
        let headers = request.headers().clone();
        let form: SignOut = read_form(request).await?;
        csrf::check(csrf, form.csrf.as_deref())?;
        self.sessions.close(&headers);
        tracing::info!("console: an operator signed out");
        let cookie = session::clear_cookie(self.settings.tls);
        Ok(with_cookie(see_other("/admin/ui"), &cookie))
    }
}

async fn read_form<T: serde::de::DeserializeOwned>(
    request: Request<Incoming>,
) -> Result<T, ApiError> {
    let body = Limited::new(request.into_body(), MAX_FORM_BYTES)
        .collect()
        .await
        .map_err(|_| ApiError::BadRequest(format!("a form of at most {MAX_FORM_BYTES} bytes")))?
        .to_bytes();
    serde_urlencoded::from_bytes(&body).map_err(|e| ApiError::BadRequest(format!("bad form: {e}")))
}

fn see_other(location: &'static str) -> Reply {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, location)
        .body(Full::default())
        .unwrap_or_default()
}

fn with_cookie(mut reply: Reply, cookie: &str) -> Reply {
    if let Ok(value) = header::HeaderValue::from_str(cookie) {
        reply.headers_mut().insert(header::SET_COOKIE, value);
    }
    reply
}
