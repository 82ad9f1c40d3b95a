//! The dashboard through the front door, as a browser without JavaScript uses it: [`DashClient`]
//! keeps cookies (or holds planted ones), fetches pages and posts
//! `application/x-www-form-urlencoded` forms without following redirects; [`setup_token`] reads
//! the first-run link from the server log; [`create_user`] makes an account with
//! `convapi user create --password-stdin`.

use std::cell::RefCell;
use std::io::Write;
use std::process::{Command, Stdio};

use super::app::{scrub_env, TestApp, BIN};
use super::cli::CliRun;
use super::client::{agent, send, Resp};

/// A browser's cookie jar and forms, for one [`TestApp`].
pub struct DashClient<'a> {
    pub app: &'a TestApp,
    agent: ureq::Agent,
    /// Cookies by name, as the server last set them.
    cookies: RefCell<Vec<(String, String)>>,
    /// Extra headers sent with every request (e.g. `X-Forwarded-For`).
    pub headers: Vec<(String, String)>,
}

impl<'a> DashClient<'a> {
    pub fn new(app: &'a TestApp) -> DashClient<'a> {
        DashClient {
            app,
            agent: agent(),
            cookies: RefCell::new(Vec::new()),
            headers: Vec::new(),
        }
    }

    /// Another client with this one's cookies and headers: another tab of the same browser, for
    /// another thread (a client is not shared between threads).
    pub fn another_tab(&self) -> DashClient<'a> {
        DashClient {
            app: self.app,
            agent: agent(),
            cookies: RefCell::new(self.cookies.borrow().clone()),
            headers: self.headers.clone(),
        }
    }

    /// The value of a cookie the server set (and did not delete).
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.cookies
            .borrow()
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// Sets or replaces a cookie by hand (a stolen or stale one, say).
    pub fn set_cookie(&self, name: &str, value: &str) {
        let mut jar = self.cookies.borrow_mut();
        jar.retain(|(k, _)| k != name);
        jar.push((name.to_owned(), value.to_owned()));
    }

    /// Forgets every cookie.
    pub fn clear_cookies(&self) {
        self.cookies.borrow_mut().clear();
    }

    /// Any method with `extra` headers and an optional body, sending the jar's cookies (a
    /// `Cookie` among `extra` is sent as well, as a browser with a planted cookie would).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        let jar = self
            .cookies
            .borrow()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        if !jar.is_empty() {
            headers.push(("Cookie", &jar));
        }
        for (k, v) in &self.headers {
            headers.push((k, v));
        }
        let resp = send(
            &self.agent,
            method,
            &format!("{}{path}", self.app.base),
            &headers,
            body,
        );
        self.keep_cookies(&resp);
        resp
    }

    fn keep_cookies(&self, resp: &Resp) {
        let mut jar = self.cookies.borrow_mut();
        for value in set_cookies(resp) {
            let first = value.split(';').next().unwrap_or("");
            let Some((name, v)) = first.split_once('=') else {
                continue;
            };
            let (name, v) = (name.trim().to_owned(), v.trim().to_owned());
            jar.retain(|(k, _)| *k != name);
            let deleted = value
                .split(';')
                .any(|a| a.trim().eq_ignore_ascii_case("max-age=0"));
            if !deleted {
                jar.push((name, v));
            }
        }
    }

    /// `GET path` (appended to the app's base), redirects not followed.
    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], None)
    }

    /// `POST path` with the form `fields`, redirects not followed.
    pub fn post_form(&self, path: &str, fields: &[(&str, &str)]) -> Resp {
        self.post_form_with(path, fields, &[])
    }

    /// [`post_form`](Self::post_form) with `extra` request headers (a forged
    /// `X-Forwarded-For`, say).
    pub fn post_form_with(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        extra: &[(&str, &str)],
    ) -> Resp {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut headers = extra.to_vec();
        headers.push(("Content-Type", "application/x-www-form-urlencoded"));
        self.request("POST", path, &headers, Some(body.as_bytes()))
    }

    /// A logged-in form: `POST path` with `fields` and this session's CSRF token.
    pub fn submit(&self, path: &str, fields: &[(&str, &str)]) -> Resp {
        let csrf = self.csrf();
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        self.post_form(path, &all)
    }

    /// `GET path`, asserting 200; the page's HTML.
    #[track_caller]
    pub fn page(&self, path: &str) -> String {
        let r = self.get(path);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.text()
    }

    /// The value of the hidden `csrf` input of a page.
    #[track_caller]
    pub fn csrf_from(html: &str) -> String {
        input_value(html, "csrf").unwrap_or_else(|| panic!("no csrf field in:\n{html}"))
    }

    /// The login form's CSRF token (its double-submit cookie is now in the jar).
    #[track_caller]
    pub fn login_csrf(&self) -> String {
        let page = self.get("/dashboard/login");
        assert_eq!(page.status, 200, "login page: {}", page.text());
        Self::csrf_from(&page.text())
    }

    /// Opens the login page and posts `email` and `password` with its CSRF token; returns the
    /// answer to the POST (`303` on success).
    pub fn login(&self, email: &str, password: &str) -> Resp {
        let csrf = self.login_csrf();
        self.post_form(
            "/dashboard/login",
            &[("csrf", &csrf), ("email", email), ("password", password)],
        )
    }

    /// A new client logged in as `email`: the login answered 303 to `/dashboard/` with a
    /// session cookie.
    #[track_caller]
    pub fn logged_in(app: &'a TestApp, email: &str, password: &str) -> DashClient<'a> {
        let c = DashClient::new(app);
        let r = c.login(email, password);
        assert_eq!(
            (r.status, r.header("location")),
            (303, Some("/dashboard/")),
            "login {email}: {}",
            r.text()
        );
        assert!(c.cookie("convapi_session").is_some());
        c
    }

    /// A logged-in page's CSRF token (from its log-out form).
    #[track_caller]
    pub fn csrf(&self) -> String {
        let page = self.get("/dashboard/account");
        assert_eq!(page.status, 200, "account page: {}", page.text());
        Self::csrf_from(&page.text())
    }
}

/// Every `Set-Cookie` header of an answer, whole (attributes included).
pub fn set_cookies(r: &Resp) -> Vec<String> {
    r.headers
        .iter()
        .filter(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
        .collect()
}

/// The fields of the first-run form; `csrf: None` leaves the token out.
pub fn setup_fields<'f>(
    token: &'f str,
    csrf: Option<&'f str>,
    tenant: &'f str,
    organization: &'f str,
    email: &'f str,
    password: &'f str,
) -> Vec<(&'f str, &'f str)> {
    let mut f = vec![
        ("token", token),
        ("tenant", tenant),
        ("organization", organization),
        ("email", email),
        ("password", password),
        ("password_confirm", password),
    ];
    f.extend(csrf.map(|c| ("csrf", c)));
    f
}

/// The `value` of the first `<input>` named `name` in `html`.
pub fn input_value(html: &str, name: &str) -> Option<String> {
    let needle = format!("name=\"{name}\"");
    html.split("<input").skip(1).find_map(|tag| {
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        if !tag.contains(&needle) {
            return None;
        }
        let start = tag.find("value=\"")? + "value=\"".len();
        let end = tag[start..].find('"')? + start;
        Some(tag[start..end].to_owned())
    })
}

/// The first-run token of the server's log line `...setup?token=TOKEN ...` (waited for: the
/// line may come a moment after the port is open), asserting its 32 base62 characters.
#[track_caller]
pub fn setup_token(app: &TestApp) -> String {
    let mut token = None;
    super::browser::poll("serve to log the one-time setup link", || {
        let log = app.log();
        token = log.rfind("setup?token=").map(|at| {
            log[at + "setup?token=".len()..]
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect::<String>()
        });
        token.as_ref().is_some_and(|t| !t.is_empty())
    });
    let token = token.unwrap();
    assert_eq!(token.len(), 32, "32 base62 characters: {token:?}");
    token
}

/// `convapi user create --tenant TENANT --email EMAIL --password-stdin ARGS...` with `stdin`.
pub fn user_create_run(
    app: &TestApp,
    tenant: &str,
    email: &str,
    stdin: &str,
    args: &[&str],
) -> CliRun {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    cmd.arg("--db")
        .arg(&app.db)
        .args([
            "user",
            "create",
            "--tenant",
            tenant,
            "--email",
            email,
            "--password-stdin",
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run convapi user create");
    let written = child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes());
    // A command that refuses its arguments (no such tenant, not an email) may exit before it
    // reads stdin: the password then meets a closed pipe, and the exit code says the rest.
    if let Err(e) = written {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "write the password: {e}"
        );
    }
    let out = child.wait_with_output().expect("wait for convapi");
    CliRun {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Creates a dashboard user through the CLI; returns its id.
#[track_caller]
pub fn create_user(app: &TestApp, tenant: &str, email: &str, password: &str) -> String {
    let run = user_create_run(app, tenant, email, &format!("{password}\n"), &["--json"]);
    run.json()["id"].as_str().expect("user id").to_owned()
}
