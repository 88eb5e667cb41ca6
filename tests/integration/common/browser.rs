//! A real browser for the tests: Debian's headless `chromium`, driven over WebDriver by
//! `chromedriver` on a free port (both from apt: `scripts/test.sh` installs them; nothing
//! is downloaded at run time). Every wait polls the page against a deadline.

use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::{Proc, free_port, wait_for_port};

/// How long a page may take to show what a test waits for: generous, for a busy
/// 2-core machine, but bounded.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(45);

pub struct Browser {
    pub client: Client,
    profile: PathBuf,
    _driver: Proc,
}

fn binary(name: &str, fallback: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fallback.to_owned())
}

impl Browser {
    /// Headless Chromium in a profile of its own, 1280×900.
    pub async fn start() -> Self {
        let driver = binary("MTG_CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = binary("MTG_CHROMIUM", "/usr/bin/chromium");
        assert!(
            std::path::Path::new(&driver).exists() && std::path::Path::new(&chromium).exists(),
            "{driver} and {chromium} are needed: apt-get install chromium chromium-driver \
             (scripts/test.sh does)"
        );
        let port = free_port();
        let mut command = Command::new(&driver);
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let driver = Proc::spawn(command, "chromedriver").expect("chromedriver starts");
        wait_for_port(port);
        let profile = std::env::temp_dir().join(format!("mtg-chromium-{}", uuid::Uuid::new_v4()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    // Root in a container has no user namespace to sandbox with.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        // Two rustls providers are linked (as in the gateway): name one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = ClientBuilder::rustls()
            .expect("rustls connector")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session in headless Chromium");
        Self {
            client,
            profile,
            _driver: driver,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
    }

    /// The text of the element `css` selects, or `None` while there is none.
    pub async fn text_of(&self, css: &str) -> Option<String> {
        let element = self.client.find(Locator::Css(css)).await.ok()?;
        element.text().await.ok()
    }

    /// Waits until `probe` gives `Some`, polling the page.
    pub async fn until<T, F, Fut>(&self, what: &str, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Some(value) = probe().await {
                return value;
            }
            assert!(
                start.elapsed() < PAGE_DEADLINE,
                "timed out waiting for {what}; the page's text: {}",
                self.text_of("body").await.unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the element `css` selects shows `text` (exactly, trimmed).
    pub async fn until_text(&self, css: &str, text: &str) {
        self.until(&format!("{css} to read {text:?}"), || async {
            (self.text_of(css).await?.trim() == text).then_some(())
        })
        .await
    }

    pub async fn click(&self, css: &str) {
        let element = self
            .until(&format!("{css} to click"), || async {
                self.client.find(Locator::Css(css)).await.ok()
            })
            .await;
        element.click().await.expect("the click lands");
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.client.find(Locator::Css(css)).await.expect(css);
        element.send_keys(text).await.expect("typing lands");
    }

    pub async fn script(&self, code: &str) -> Value {
        self.client.execute(code, vec![]).await.expect(code)
    }

    /// Marks this document; [`Self::same_document`] is true until a navigation or reload.
    pub async fn mark_document(&self) {
        self.script("window.__mtgMark = 'still here'; return null;")
            .await;
    }

    pub async fn same_document(&self) -> bool {
        self.script("return window.__mtgMark === 'still here';")
            .await
            == json!(true)
    }

    /// Whether an alert, confirm or prompt dialog is open.
    pub async fn dialog_open(&self) -> bool {
        self.client.get_alert_text().await.is_ok()
    }

    /// A PNG of the window, written to `path` (folders made).
    pub async fn screenshot(&self, path: &std::path::Path) {
        let png = self.client.screenshot().await.expect("a screenshot");
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).expect("the screenshot's folder");
        }
        std::fs::write(path, png).expect("the screenshot is written");
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
