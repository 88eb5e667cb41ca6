//! A 2025-11-25 session client for the tests: `initialize` opens the session, and every
//! later request carries its id (and the client's credentials, if any).

use futures_util::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;

#[derive(Clone, Debug)]
pub struct SessionClient {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub authorization: Option<String>,
}

/// The body of an `initialize` at `version` with `capabilities`.
pub fn initialize_body(version: &str, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version,
        "capabilities": capabilities,
        "clientInfo": {"name": "gateway-tests", "version": "0"}
    }})
}

impl SessionClient {
    pub fn new(url: &str) -> Self {
        Self::with_http(url, reqwest::Client::new())
    }

    /// A client on a shared `http`: making a reqwest client loads the system's roots
    /// (the gateway's webhooks enable them), too slow to do 10,000 times.
    pub fn with_http(url: &str, http: reqwest::Client) -> Self {
        Self {
            http,
            url: url.to_owned(),
            session: None,
            authorization: None,
        }
    }

    /// The same client with `Authorization: credentials`.
    pub fn with_authorization(mut self, credentials: &str) -> Self {
        self.authorization = Some(credentials.to_owned());
        self
    }

    fn with_headers(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(credentials) = &self.authorization {
            request = request.header("authorization", credentials);
        }
        request
    }

    pub async fn post(&self, body: Value) -> reqwest::Response {
        let request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        self.with_headers(request)
            .send()
            .await
            .expect("gateway reachable")
    }

    /// Sends `initialize`; keeps the session id of a 200 answer. The raw answer, for
    /// tests about refusals.
    pub async fn try_initialize(
        &mut self,
        version: &str,
        capabilities: Value,
    ) -> reqwest::Response {
        let response = self.post(initialize_body(version, capabilities)).await;
        if response.status() == 200 {
            self.session = response
                .headers()
                .get("mcp-session-id")
                .map(|id| id.to_str().expect("an ASCII session id").to_owned());
        }
        response
    }

    /// Opens the session (`initialize`, then `notifications/initialized`); returns the
    /// `InitializeResult`.
    pub async fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let response = self.try_initialize(version, capabilities).await;
        assert_eq!(response.status(), 200);
        assert!(self.session.is_some(), "no mcp-session-id on the answer");
        let answer = read_messages(response).await.pop().expect("an answer");
        let ack = self
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(ack.status(), 202);
        answer["result"].clone()
    }

    /// `GET` of the session's standalone stream.
    pub async fn get(&self) -> reqwest::Response {
        let request = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream");
        self.with_headers(request)
            .send()
            .await
            .expect("gateway reachable")
    }

    /// `DELETE` of the session.
    pub async fn delete(&self) -> reqwest::Response {
        self.with_headers(self.http.delete(&self.url))
            .send()
            .await
            .expect("gateway reachable")
    }
}

/// Every message of an answer, a JSON body or a whole SSE stream.
pub async fn read_messages(response: reqwest::Response) -> Vec<Value> {
    let is_sse = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !is_sse {
        return vec![response.json().await.expect("a JSON body")];
    }
    let mut stream = SseStream::from_bytes_stream(response.bytes_stream());
    let mut out = Vec::new();
    while let Some(event) = stream.next().await {
        if let Some(data) = event
            .expect("an SSE event")
            .data
            .filter(|d| !d.trim().is_empty())
        {
            out.push(serde_json::from_str(&data).expect("a JSON message"));
        }
    }
    out
}

/// The next message on an SSE stream that is still open.
pub async fn next_message<E: std::fmt::Debug>(
    stream: &mut (impl futures_util::Stream<Item = Result<sse_stream::Sse, E>> + Unpin),
) -> Value {
    loop {
        let event = stream.next().await.expect("another message").unwrap();
        if let Some(data) = event.data.filter(|d| !d.trim().is_empty()) {
            return serde_json::from_str(&data).unwrap();
        }
    }
}
