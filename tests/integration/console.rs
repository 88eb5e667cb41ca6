//! The operator's console (`/admin/ui`) as an operator uses it: in headless Chromium
//! over WebDriver against real gateways (two sharing a real Redis where instances
//! matter), the fixture upstream, and MCP clients making the tasks. Refusals (CSRF, a
//! signed-out session) and paging over 10,000 tasks are checked over plain HTTP too.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use mtg_protocol::wire::TaskStatus;
use mtg_store::redis::{RedisSettings, RedisStore, StoreNamespace, Target};
use mtg_store::{Outcome, TaskRecord, TaskStore, now_ms};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use test_support::RedisServer;

use crate::common::admin;
use crate::common::browser::Browser;
use crate::common::*;

const TOKEN: &str = "a-console-token-of-some-length";
const SCRIPT_XSS: &str = "<script>alert(1)</script>";
const IMG_XSS: &str = "\"><img src=x onerror=alert(1)>";

/// A gateway with its admin listener: (process, client URL, admin base URL).
struct Admin {
    _gateway: Proc,
    url: String,
    admin: String,
}

fn start(upstream_url: &str, extra: &[&str]) -> Admin {
    let (gateway, url, admin) = admin::start_admin_gateway(upstream_url, TOKEN, extra);
    Admin {
        _gateway: gateway,
        url,
        admin,
    }
}

/// Two gateways, `gw-a` and `gw-b`, sharing `redis`.
fn two_instances(redis: &RedisServer, upstream_url: &str) -> (Admin, Admin) {
    let redis_url = redis.url();
    let on = |id: &str| {
        start(
            upstream_url,
            &[
                "--redis",
                &redis_url,
                "--instance-id",
                id,
                "--lease-timeout-ms",
                "3000",
            ],
        )
    };
    (on("gw-a"), on("gw-b"))
}

fn client_of(url: &str, who: &str) -> Client {
    let mut client = Client::with_tasks(url);
    client.authorization = Some(format!("Bearer {who}"));
    client
}

/// Signs `browser` in at `admin`'s console; the overview follows.
async fn sign_in(browser: &Browser, admin: &str) {
    browser.goto(&format!("{admin}/admin/ui")).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#sign-in-submit").await;
    browser
        .until("the overview after signing in", || async {
            browser.text_of("#instances-table").await
        })
        .await;
}

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/img")
        .join(name)
}

#[tokio::test]
async fn console_sign_in_refuses_a_wrong_token_and_shows_both_instances() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (a, b) = two_instances(&redis, &upstream_url);
    let browser = Browser::start().await;

    browser.goto(&format!("{}/admin/ui", b.admin)).await;
    browser
        .type_into("#token", "not-the-right-token-at-all")
        .await;
    browser.click("#sign-in-submit").await;
    browser.until_text("#sign-in-error", "wrong token").await;
    // Still the sign-in form: no session, nothing of the console.
    assert!(browser.text_of("#instances-table").await.is_none());
    browser.goto(&format!("{}/admin/ui/tasks", b.admin)).await;
    browser
        .until("the sign-in form again", || async {
            browser.text_of("#sign-in").await
        })
        .await;

    sign_in(&browser, &b.admin).await;
    for instance in ["gw-a", "gw-b"] {
        browser
            .until(&format!("{instance} in the instances table"), || async {
                browser
                    .text_of(&format!("#instances-table tr[data-instance='{instance}']"))
                    .await
            })
            .await;
    }
    let this = browser
        .text_of("#instances-table tr[data-instance='gw-b']")
        .await
        .unwrap();
    assert!(this.contains("this one") && this.contains("live"), "{this}");
    let upstream = browser.text_of("#upstreams-table").await.unwrap();
    assert!(
        upstream.contains("/mcp") && upstream.contains("ready"),
        "{upstream}"
    );

    // A task running on A shows as owned by A, on B's overview, by itself.
    browser.mark_document().await;
    let alice = client_of(&a.url, "alice");
    let running = alice.start_task("sleep", json!({"ms": 60000})).await;
    browser
        .until("gw-a owning a task", || async {
            let row = browser
                .text_of("#instances-table tr[data-instance='gw-a']")
                .await?;
            row.trim().ends_with('1').then_some(())
        })
        .await;
    assert!(browser.same_document().await, "the overview reloaded");
    alice.cancel(&running).await;
    browser.close().await;
}

#[tokio::test]
async fn console_shows_a_question_and_its_answer_without_a_reload() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (a, b) = two_instances(&redis, &upstream_url);
    let browser = Browser::start().await;
    sign_in(&browser, &b.admin).await;
    browser.mark_document().await;

    // A task that asks a question, made on A, appears on B's overview by itself.
    let alice = client_of(&a.url, "alice");
    let task_id = alice.start_task("ask_name", json!({})).await;
    let waiting_row = format!("#waiting-table tr[data-task='{task_id}']");
    browser
        .until_text(&format!("{waiting_row} td.asks"), "What is your name?")
        .await;
    assert!(browser.same_document().await, "the overview reloaded");
    let input_required = browser
        .text_of("#counts-table td[data-count='input_required']")
        .await
        .unwrap();
    assert_eq!(input_required.trim(), "1");
    browser
        .screenshot(&screenshot_path("console-overview.png"))
        .await;

    // Its page shows the question; the answer turns it to completed by itself.
    browser.click(&format!("{waiting_row} a")).await;
    browser.until_text("#task-status", "input_required").await;
    browser
        .until_text("#task-inputs .input-message", "What is your name?")
        .await;
    let inputs = browser.text_of("#task-inputs").await.unwrap();
    assert!(inputs.contains("elicitation/create"), "{inputs}");
    for (id, expected) in [
        ("#task-tool", "ask_name"),
        ("#task-upstream", "/mcp"),
        ("#task-takeovers", "0"),
    ] {
        assert_eq!(browser.text_of(id).await.unwrap().trim(), expected, "{id}");
    }
    assert!(
        browser
            .text_of("#task-owner")
            .await
            .unwrap()
            .starts_with("gw-a")
    );
    browser
        .screenshot(&screenshot_path("console-task.png"))
        .await;
    browser.mark_document().await;
    let task = alice.get_task(&task_id).await;
    let (key, _) = only_input_request(&task);
    let answer = json!({key: {"action": "accept", "content": {"name": "Ada"}}});
    alice.update(&task_id, answer).await;
    browser.until_text("#task-status", "completed").await;
    assert!(browser.same_document().await, "the task page reloaded");
    let size = browser.text_of("#task-result-size").await.unwrap();
    assert!(size.starts_with("Result: "), "{size}");
    // Without --admin-show-results the result itself is not on the page.
    assert!(browser.text_of("#task-result").await.is_none());
    assert!(
        !browser
            .text_of("body")
            .await
            .unwrap()
            .contains("Hello, Ada")
    );
    browser.close().await;
}

#[tokio::test]
async fn console_cancel_on_b_stops_a_task_running_on_a() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (a, b) = two_instances(&redis, &upstream_url);
    let alice = client_of(&a.url, "alice");
    let task_id = alice.start_task("sleep", json!({"ms": 60000})).await;
    assert_eq!(owner_of(&redis, &task_id), "gw-a");

    let browser = Browser::start().await;
    sign_in(&browser, &b.admin).await;
    browser
        .goto(&format!("{}/admin/ui/tasks/{task_id}", b.admin))
        .await;
    browser.until_text("#task-status", "working").await;
    browser.click("#cancel-task").await;
    // Nothing happens before the confirmation.
    browser.click("#cancel-no").await;
    assert_eq!(alice.get_task(&task_id).await["status"], "working");
    browser.click("#cancel-task").await;
    browser.click("#cancel-yes").await;
    browser.until_text("#task-status", "cancelled").await;
    browser.until_text("#cancel-outcome", "Cancelled.").await;

    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"].as_array()?.len() == 1 && stats["callsInFlight"] == 0)
            .then_some(())
    })
    .await;
    let seen = alice.get_task(&task_id).await;
    assert_eq!(seen["status"], "cancelled", "{seen}");
    assert_eq!(status_message(&seen), "cancelled by an operator");
    browser.close().await;
}

/// A console session over plain HTTP: its cookie and CSRF token.
struct HttpSession {
    http: reqwest::Client,
    admin: String,
    cookie: String,
    csrf: String,
}

impl HttpSession {
    async fn sign_in(admin: &str) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let signed = http
            .post(format!("{admin}/admin/ui/sign-in"))
            .form(&[("token", TOKEN)])
            .send()
            .await
            .unwrap();
        assert_eq!(signed.status(), 303);
        let set_cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
        for part in [
            "HttpOnly",
            "SameSite=Strict",
            "Path=/admin/ui",
            "Max-Age=28800",
        ] {
            assert!(set_cookie.contains(part), "{set_cookie}");
        }
        assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        let page = http
            .get(format!("{admin}/admin/ui"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let csrf = page
            .split("name=\"csrf-token\" content=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the page's CSRF token")
            .to_owned();
        Self {
            http,
            admin: admin.to_owned(),
            cookie,
            csrf,
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.admin))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap()
    }

    async fn get_json(&self, path: &str) -> Value {
        let reply = self.get(path).await;
        assert_eq!(reply.status(), 200, "{path}");
        reply.json().await.unwrap()
    }

    async fn cancel(&self, task_id: &str, csrf: Option<&str>) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!(
                "{}/admin/ui/api/tasks/{task_id}/cancel",
                self.admin
            ))
            .header("cookie", &self.cookie);
        if let Some(csrf) = csrf {
            request = request.header("x-csrf-token", csrf);
        }
        let reply = request.send().await.unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.unwrap_or(Value::Null))
    }
}

const HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

fn assert_secure_headers(reply: &reqwest::Response, what: &str) {
    for (name, value) in HEADERS {
        assert_eq!(
            reply.headers().get(name).and_then(|v| v.to_str().ok()),
            Some(value),
            "{name} of {what}"
        );
    }
}

#[tokio::test]
async fn console_refuses_a_cancel_without_csrf_or_after_sign_out() {
    let (_upstream, upstream_url) = start_plain_server();
    let gateway = start(&upstream_url, &[]);
    let alice = client_of(&gateway.url, "alice");
    let task_id = alice.start_task("sleep", json!({"ms": 60000})).await;
    let session = HttpSession::sign_in(&gateway.admin).await;

    // Pages and JSON carry the headers, and never the token.
    for path in [
        "/admin/ui",
        "/admin/ui/tasks",
        &format!("/admin/ui/tasks/{task_id}"),
        "/admin/ui/api/overview",
        "/admin/ui/api/tasks",
        &format!("/admin/ui/api/tasks/{task_id}"),
        "/admin/ui/assets/console.js",
    ] {
        let reply = session.get(path).await;
        assert_eq!(reply.status(), 200, "{path}");
        assert_secure_headers(&reply, path);
        let body = reply.text().await.unwrap();
        assert!(!body.contains(TOKEN), "the token on {path}");
        assert!(!body.contains("Bearer alice"), "a credential on {path}");
    }
    let signed_out_page = reqwest::get(format!("{}/admin/ui", gateway.admin))
        .await
        .unwrap();
    assert_secure_headers(&signed_out_page, "the sign-in page");

    // No CSRF token, or a wrong one: refused, nothing cancelled.
    let (status, body) = session.cancel(&task_id, None).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("CSRF"), "{body}");
    let (status, _) = session.cancel(&task_id, Some("forged")).await;
    assert_eq!(status, 403);
    // The cookie alone, from a form of another page: refused too.
    let (status, _) = session.cancel(&task_id, Some("")).await;
    assert_eq!(status, 403);
    assert_eq!(alice.get_task(&task_id).await["status"], "working");

    // Sign-out needs the token as well, and ends the session.
    let refused = session
        .http
        .post(format!("{}/admin/ui/sign-out", gateway.admin))
        .header("cookie", &session.cookie)
        .form(&[("csrf", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(session.get("/admin/ui/api/overview").await.status(), 200);
    let out = session
        .http
        .post(format!("{}/admin/ui/sign-out", gateway.admin))
        .header("cookie", &session.cookie)
        .form(&[("csrf", session.csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert!(
        out.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, _) = session.cancel(&task_id, Some(&session.csrf)).await;
    assert_eq!(status, 401, "a signed-out session's cookie");
    assert_eq!(session.get("/admin/ui/api/overview").await.status(), 401);
    assert_eq!(alice.get_task(&task_id).await["status"], "working");

    // The API keeps taking its bearer token, and not a console cookie.
    let (status, _) = admin::request(
        "GET",
        &format!("{}/admin/tasks/{task_id}", gateway.admin),
        TOKEN,
    )
    .await;
    assert_eq!(status, 200);
    let with_cookie = session
        .http
        .get(format!("{}/admin/tasks", gateway.admin))
        .header("cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 401);
    alice.cancel(&task_id).await;
}

#[tokio::test]
async fn console_shows_hostile_task_text_as_text() {
    let (_upstream, upstream_url) = start_plain_server();
    let gateway = start(&upstream_url, &["--admin-show-results"]);
    let alice = client_of(&gateway.url, "alice");
    let browser = Browser::start().await;
    sign_in(&browser, &gateway.admin).await;
    for (status, message) in [(SCRIPT_XSS, IMG_XSS), (IMG_XSS, SCRIPT_XSS)] {
        let task_id = alice
            .start_task(
                "ask_verbatim",
                json!({"status": status, "message": message}),
            )
            .await;
        alice
            .poll_until(&task_id, |t| {
                t["status"] == "input_required" && t["statusMessage"] == status
            })
            .await;
        // On the overview, as a waiting task's message.
        browser.goto(&format!("{}/admin/ui", gateway.admin)).await;
        browser
            .until("the waiting task's message, as text", || async {
                let row = browser
                    .text_of(&format!("#waiting-table tr[data-task='{task_id}']"))
                    .await?;
                (row.contains(status) && row.contains(message)).then_some(())
            })
            .await;
        assert_nothing_injected(&browser).await;

        // On its page: the status message, the question, the arguments.
        browser
            .goto(&format!("{}/admin/ui/tasks/{task_id}", gateway.admin))
            .await;
        browser.until_text("#task-message", status).await;
        browser
            .until_text("#task-inputs .input-message", message)
            .await;
        let arguments = browser.text_of("#task-arguments").await.unwrap();
        assert!(arguments.contains("onerror=alert(1)"), "{arguments}");
        assert_nothing_injected(&browser).await;

        // In the table.
        browser
            .goto(&format!(
                "{}/admin/ui/tasks?tool=ask_verbatim",
                gateway.admin
            ))
            .await;
        browser
            .until("the task in the table", || async {
                let row = browser
                    .text_of(&format!("#tasks-table tr[data-task='{task_id}']"))
                    .await?;
                row.contains(status).then_some(())
            })
            .await;
        assert_nothing_injected(&browser).await;

        // Answered with the other string: the result (shown with --admin-show-results)
        // holds it, as text.
        let waiting = alice.get_task(&task_id).await;
        let (key, _) = only_input_request(&waiting);
        let answer = json!({key: {"action": "accept", "content": {"name": status}}});
        alice.update(&task_id, answer).await;
        alice.wait_status(&task_id, "completed").await;
        browser
            .goto(&format!("{}/admin/ui/tasks/{task_id}", gateway.admin))
            .await;
        browser.until_text("#task-status", "completed").await;
        let result = browser.text_of("#task-result").await.unwrap();
        assert!(
            result.contains(&format!("Hello, {}!", status.replace('"', "\\\""))),
            "{result}"
        );
        assert_nothing_injected(&browser).await;
    }
    browser.close().await;
}

/// No element made of a task's text, and no dialog opened by one.
async fn assert_nothing_injected(browser: &Browser) {
    let found = browser
        .script(
            "return { images: document.images.length, \
              scripts: Array.from(document.scripts).map(s => s.src), \
              handlers: document.querySelectorAll('[onerror]').length };",
        )
        .await;
    assert_eq!(found["images"], 0, "{found}");
    assert_eq!(found["handlers"], 0, "{found}");
    let scripts = found["scripts"].as_array().unwrap();
    assert_eq!(scripts.len(), 1, "{found}");
    assert!(
        scripts[0]
            .as_str()
            .unwrap()
            .ends_with("/admin/ui/assets/console.js"),
        "{found}"
    );
    assert!(!browser.dialog_open().await, "an alert opened");
}

const SEEDED: usize = 10_000;
const TOOLS: [&str; 3] = ["lookup", "sleep", "echo"];

/// `SEEDED` tasks written straight into the store (as the gateway would keep them; far
/// faster than 10,000 MCP calls): 100 ms apart, three tools, four principals, every
/// fifth completed, every seventh input_required. Their ids, newest first, with each.
async fn seed(redis: &RedisServer, namespace: &str) -> Vec<TaskRecord> {
    let store = RedisStore::connect(RedisSettings {
        target: Target::Server(redis.url()),
        instance_id: "gw-seed".into(),
        wait_replicas: 0,
        timeout: Duration::from_secs(10),
        max_ttl: Duration::from_secs(86_400),
        ca_cert: None,
        namespace: StoreNamespace::Named(namespace.into()),
        terminal_cache_bytes: 0,
    })
    .unwrap();
    let now = now_ms();
    let tasks: Vec<TaskRecord> = (0..SEEDED)
        .map(|n| {
            let created = now - 60_000 - (SEEDED - n) as u64 * 100;
            let tool = TOOLS[n % 3];
            // Every fifth is completed below, once created.
            let status = if n % 7 == 0 && n % 5 != 0 {
                TaskStatus::InputRequired
            } else {
                TaskStatus::Working
            };
            TaskRecord {
                task_id: uuid::Uuid::new_v4().to_string(),
                principal: format!("p-{}", n % 4),
                owner: "gw-seed".into(),
                status,
                status_message: None,
                created_at_ms: created,
                last_updated_at_ms: created,
                ttl_ms: 3_600_000,
                poll_interval_ms: 1000,
                input_requests: Default::default(),
                answers: Default::default(),
                next_input_key: 0,
                result: None,
                error: None,
                request: RawValue::from_string(
                    json!({"name": tool, "arguments": {"n": n}}).to_string(),
                )
                .unwrap(),
                upstream_state: None,
                resume: None,
                takeovers: 0,
                keep_arguments: false,
            }
        })
        .collect();
    for (batch_start, batch) in tasks.chunks(250).enumerate() {
        futures_util::future::try_join_all(batch.iter().enumerate().map(|(i, task)| {
            let store = store.clone();
            let n = batch_start * 250 + i;
            async move {
                store.create(task.clone()).await?;
                if n % 5 == 0 {
                    let done = Outcome::Completed(RawValue::from_string("{}".into()).unwrap());
                    store.finish(&task.task_id, done).await?;
                }
                Ok::<_, mtg_store::StoreError>(())
            }
        }))
        .await
        .unwrap();
    }
    let mut tasks = tasks;
    for (n, task) in tasks.iter_mut().enumerate() {
        if n % 5 == 0 {
            task.status = TaskStatus::Completed;
        }
    }
    tasks.sort_by(|a, b| (b.created_at_ms, &b.task_id).cmp(&(a.created_at_ms, &a.task_id)));
    tasks
}

/// Every page of `query` by `limit`: each at most `limit`, newest first, no task twice;
/// the ids listed, in order.
async fn page_through(session: &HttpSession, query: &str, limit: usize) -> Vec<String> {
    let mut listed: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    let mut last_created = String::from("~");
    for _ in 0..(SEEDED * 2) {
        let mut path = format!("/admin/ui/api/tasks?limit={limit}&{query}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={}", urlencode(cursor)));
        }
        let page = session.get_json(&path).await;
        let tasks = page["tasks"].as_array().unwrap();
        assert!(
            tasks.len() <= limit,
            "{} in a page of {limit} ({query})",
            tasks.len()
        );
        for task in tasks {
            let id = task["taskId"].as_str().unwrap().to_owned();
            assert!(seen.insert(id.clone()), "{id} listed twice ({query})");
            let created = task["createdAt"].as_str().unwrap().to_owned();
            assert!(created <= last_created, "not newest first ({query})");
            last_created = created;
            listed.push(id);
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return listed,
        }
    }
    panic!("the walk of {query} did not end");
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn console_pages_and_filters_10000_tasks_on_redis() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let namespace = "console-paging";
    let gateway = start(
        &upstream_url,
        &["--redis", &redis.url(), "--store-namespace", namespace],
    );
    let seeded = seed(&redis, namespace).await;
    let session = HttpSession::sign_in(&gateway.admin).await;
    let ids = |keep: &dyn Fn(&TaskRecord) -> bool| -> Vec<String> {
        seeded
            .iter()
            .filter(|task| keep(task))
            .map(|task| task.task_id.clone())
            .collect()
    };
    let tool_of = |task: &TaskRecord| -> String {
        let request: Value = serde_json::from_str(task.request.get()).unwrap();
        request["name"].as_str().unwrap().to_owned()
    };
    let cutoff_ms = now_ms() - seeded[SEEDED / 2].created_at_ms;
    let cases: Vec<(String, usize, Vec<String>)> = vec![
        (String::new(), 100, ids(&|_| true)),
        (String::new(), 500, ids(&|_| true)),
        (
            "status=completed".into(),
            250,
            ids(&|t| t.status == TaskStatus::Completed),
        ),
        (
            "status=input_required&tool=lookup".into(),
            50,
            ids(&|t| t.status == TaskStatus::InputRequired && tool_of(t) == "lookup"),
        ),
        ("tool=echo".into(), 300, ids(&|t| tool_of(t) == "echo")),
        (
            "principal=p-3&status=working".into(),
            100,
            ids(&|t| t.principal == "p-3" && t.status == TaskStatus::Working),
        ),
    ];
    for (query, limit, expected) in &cases {
        let listed = page_through(&session, query, *limit).await;
        assert_eq!(
            listed.len(),
            expected.len(),
            "{query}: {} listed of {}",
            listed.len(),
            expected.len()
        );
        assert_eq!(&listed, expected, "{query}: newest first, every task once");
    }
    // The age filter moves with the clock: what it keeps is fixed by its first page,
    // within a task or two of the edge of the moment the expected set is taken.
    let query = format!("olderThan={cutoff_ms}ms&tool=sleep");
    let expected: HashSet<String> =
        ids(&|t| now_ms() - t.created_at_ms >= cutoff_ms && tool_of(t) == "sleep")
            .into_iter()
            .collect();
    let listed: HashSet<String> = page_through(&session, &query, 200)
        .await
        .into_iter()
        .collect();
    let differ = listed.symmetric_difference(&expected).count();
    assert!(
        differ <= 2 && expected.len() > 1000,
        "{query}: {differ} of {} tasks differ",
        expected.len()
    );

    // The table in the browser pages the same way.
    let browser = Browser::start().await;
    sign_in(&browser, &gateway.admin).await;
    browser
        .goto(&format!(
            "{}/admin/ui/tasks?status=completed&limit=40",
            gateway.admin
        ))
        .await;
    let rows = "#tasks-table tbody tr";
    let first_page = rows_of(&browser, rows).await;
    assert_eq!(first_page.len(), 40);
    let completed = ids(&|t| t.status == TaskStatus::Completed);
    assert_eq!(first_page, completed[..40]);
    browser.click("#page-older").await;
    browser.until_text("#page-number", "page 2").await;
    let second_page = rows_of(&browser, rows).await;
    assert_eq!(second_page, completed[40..80]);
    browser.close().await;
}

/// The task ids of the table's rows, once it has some.
async fn rows_of(browser: &Browser, css: &str) -> Vec<String> {
    browser
        .until("the table's rows", || async {
            let ids = browser
                .script(&format!(
                    "return Array.from(document.querySelectorAll(\"{css}\")).map(r => r.dataset.task);"
                ))
                .await;
            let ids: Vec<String> = serde_json::from_value(ids).ok()?;
            (!ids.is_empty()).then_some(ids)
        })
        .await
}
