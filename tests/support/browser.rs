//! A real browser for the page's tests: Debian's headless Chromium, driven over WebDriver
//! (Debian's chromium-driver, `chromedriver`) with plain HTTP requests, to check what a
//! person sees: an element's text and its computed colour.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::envoy::{debian_tool, eventually, free_port, Process};

/// A headless Chromium session; [`Browser::close`] ends it (the driver is killed on drop
/// anyway, as every [`Process`] is).
pub struct Browser {
    driver: Process,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    /// Start chromedriver on a free port of 127.0.0.1 and open a headless session; its log
    /// goes to `dir`. Missing Chromium or its driver is a failure naming the package.
    pub async fn start(dir: &Path) -> Browser {
        let chromium = debian_tool("CHROMIUM_BIN", "chromium", "chromium");
        let chromedriver = debian_tool("CHROMEDRIVER_BIN", "chromedriver", "chromium-driver");
        let port = free_port();
        let mut cmd = Command::new(chromedriver);
        cmd.arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1");
        let driver = Process::spawn("chromedriver", cmd, dir.join("chromedriver.log"));
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("a client");
        let up = eventually(Duration::from_secs(20), || async {
            http.get(format!("{base}/status")).send().await.is_ok()
        })
        .await;
        assert!(up.is_some(), "chromedriver did not answer on {port}");
        let profile = dir.join("chromium-profile");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1024",
                         format!("--user-data-dir={}", profile.display())],
            },
        }}});
        let answer = answer_of(
            http.post(format!("{base}/session"))
                .header("content-type", "application/json")
                .body(capabilities.to_string()),
        )
        .await;
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"))
            .to_string();
        Browser {
            driver,
            base,
            session,
            http,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, url);
        if !body.is_null() {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        answer_of(request).await["value"].clone()
    }

    /// Load `url` (and wait for it, as WebDriver does).
    pub async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await;
    }

    /// The first element matching `css`, if any.
    async fn element(&self, css: &str) -> Option<String> {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found
            .as_object()?
            .values()
            .next()?
            .as_str()
            .map(str::to_string)
    }

    /// The text a person sees in the first element matching `css`.
    pub async fn text(&self, css: &str) -> Option<String> {
        let element = self.element(css).await?;
        let text = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                Value::Null,
            )
            .await;
        text.as_str().map(str::to_string)
    }

    /// The computed value of CSS `property` of the first element matching `css`
    /// (`background-color`: `rgba(212, 244, 212, 1)`).
    pub async fn css(&self, css: &str, property: &str) -> Option<String> {
        let element = self.element(css).await?;
        let value = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/css/{property}"),
                Value::Null,
            )
            .await;
        value.as_str().map(str::to_string)
    }
}

/// The driver's answer to `request`, as JSON.
async fn answer_of(request: reqwest::RequestBuilder) -> Value {
    let text = request
        .send()
        .await
        .expect("chromedriver answers")
        .text()
        .await
        .expect("a body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

impl Browser {
    /// End the session (the browser quits), then the driver.
    pub async fn close(mut self) {
        self.call(reqwest::Method::DELETE, "", Value::Null).await;
        self.driver.kill();
    }
}
