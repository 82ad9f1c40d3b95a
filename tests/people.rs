//! The dashboard's people through the front door, on either engine: invitations (from the CLI and
//! from Settings → People) that make an account and land logged in, removal that ends the removed
//! user's sessions at once, password reset links that work once and expire, TOTP two-factor
//! (required once on, recovery codes that work once, wrong codes throttled like passwords, turned
//! off with a current code), and another tenant's people out of reach.
//!
//! What belongs here: a flow of `convapi user invite / reset-password / remove` or of the people
//! and two-factor pages. A click path in Chromium goes to `dashboard_browser.rs`.

use convapi::ops::two_factor::code_at;

use crate::common::*;

const PASSWORD: &str = "correct horse battery";
const OWNER: &str = "owner@shop.example";

/// The `/dashboard/...?token=T` path of a link the CLI printed (`url` of its JSON).
fn path_of(url: &str) -> String {
    let at = url.find("/dashboard/").expect("a dashboard link");
    url[at..].to_owned()
}

/// The `token` of a link's path.
fn token_of(path: &str) -> String {
    path.split("token=").nth(1).expect("a token").to_owned()
}

/// Opens a link's page and posts a password on it, as the invitee or the user does.
fn set_password_at(c: &DashClient<'_>, path: &str, password: &str) -> Resp {
    let page = c.get(path);
    assert_eq!(page.status, 200, "GET {path}: {}", page.text());
    let csrf = DashClient::csrf_from(&page.text());
    let action = path.split('?').next().unwrap();
    c.post_form(
        action,
        &[
            ("csrf", &csrf),
            ("token", &token_of(path)),
            ("password", password),
            ("password_confirm", password),
        ],
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Turns two-factor on for the logged-in client; the secret and the recovery codes shown.
fn enrol(c: &DashClient<'_>) -> (String, Vec<String>) {
    assert_eq!(
        c.submit("/dashboard/account/two-factor/start", &[]).status,
        303
    );
    let page = c.page("/dashboard/account");
    let at = page.find("secret=").expect("the otpauth URI") + "secret=".len();
    let secret: String = page[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let wrong = c.submit(
        "/dashboard/account/two-factor/confirm",
        &[("code", "000000")],
    );
    assert_eq!(wrong.status, 400, "a wrong code does not turn it on");
    let code = code_at(&secret, unix_now()).unwrap();
    let on = c.submit("/dashboard/account/two-factor/confirm", &[("code", &code)]);
    assert_eq!(on.status, 200, "{}", on.text());
    let html = on.text();
    let list = &html[html.find("id=\"recovery-codes\"").expect("codes shown")..];
    let list = &list[..list.find("</ul>").unwrap()];
    let codes: Vec<String> = list
        .split("<code>")
        .skip(1)
        .map(|s| s[..s.find("</code>").unwrap()].to_owned())
        .collect();
    assert_eq!(codes.len(), 10, "{list}");
    assert!(
        !c.page("/dashboard/account").contains(&codes[0]),
        "shown once"
    );
    (secret, codes)
}

/// Logs in with the password: the answer is the `303` to the code step, without a session.
#[track_caller]
fn password_step(c: &DashClient<'_>, email: &str) {
    let r = c.login(email, PASSWORD);
    assert_eq!(r.status, 303, "{}", r.text());
    assert!(
        r.header("location")
            .is_some_and(|l| l.starts_with("/dashboard/login/code")),
        "{:?}",
        r.header("location")
    );
    assert!(c.cookie("convapi_session").is_none(), "no session yet");
    assert!(c.cookie("convapi_login").is_some());
}

fn code_step(c: &DashClient<'_>, code: &str) -> Resp {
    let page = c.get("/dashboard/login/code");
    assert_eq!(page.status, 200, "{}", page.text());
    let csrf = DashClient::csrf_from(&page.text());
    c.post_form(
        "/dashboard/login/code",
        &[("csrf", &csrf), ("code", code), ("next", "/dashboard/")],
    )
}

#[test]
fn an_invitation_makes_an_account_that_lands_logged_in_once() {
    let app = TestApp::start();
    // The operator's CLI prints the link.
    let inv = app.cli_json(&[
        "user",
        "invite",
        "--tenant",
        &app.tenant.id,
        "new@shop.example",
        "--public-url",
        "https://stats.shop.example",
        "--json",
    ]);
    let url = inv["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://stats.shop.example/dashboard/invite?token="),
        "{url}"
    );
    let path = path_of(url);
    let c = DashClient::new(&app);
    let page = c.page(&path);
    assert!(page.contains("new@shop.example"), "{page}");
    let r = set_password_at(&c, &path, PASSWORD);
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/")),
        "{}",
        r.text()
    );
    assert_eq!(c.get("/dashboard/").status, 200, "logged in");
    let tenant: Option<String> = app.query_str(
        "SELECT tenant_id FROM users WHERE email = ?1",
        &[&"new@shop.example"],
    );
    assert_eq!(tenant.as_deref(), Some(app.tenant.id.as_str()));
    // Once: the link is gone, and says so.
    let again = DashClient::new(&app).get(&path);
    assert_eq!(again.status, 404);
    assert!(again.text().contains("used already"), "{}", again.text());
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM user_tokens", &[]), 0);
    DashClient::logged_in(&app, "new@shop.example", PASSWORD);

    // A tenant's user invites from Settings → People: the link is on the answer.
    let owner = DashClient::logged_in(&app, "new@shop.example", PASSWORD);
    let made = owner.submit(
        "/dashboard/settings/people",
        &[("email", "Colleague@Shop.example")],
    );
    assert_eq!(made.status, 200, "{}", made.text());
    let html = made.text();
    let at = html
        .find("/dashboard/invite?token=")
        .expect("the link shown");
    let path: String = html[at..]
        .chars()
        .take_while(|c| *c != '<' && *c != '"')
        .collect();
    assert!(owner
        .page("/dashboard/settings/people")
        .contains("Colleague@Shop.example"));
    assert!(
        !owner.page("/dashboard/settings/people").contains(&path),
        "the link is shown once"
    );
    // An existing account cannot be invited.
    let dup = owner.submit(
        "/dashboard/settings/people",
        &[("email", "NEW@shop.example")],
    );
    assert_eq!(dup.status, 400, "{}", dup.text());
    assert!(dup.text().contains("has an account already"));

    let colleague = DashClient::new(&app);
    let r = set_password_at(&colleague, &path, "another password");
    assert_eq!(r.status, 303, "{}", r.text());
    let people = colleague.page("/dashboard/settings/people");
    assert!(people.contains("new@shop.example") && people.contains("Colleague@Shop.example"));
    DashClient::logged_in(&app, "colleague@shop.example", "another password");

    // An invitation whose email got an account meanwhile is refused, and stays unspent.
    let inv = app.cli_json(&[
        "user",
        "invite",
        "--tenant",
        &app.tenant.id,
        "late@shop.example",
        "--json",
    ]);
    let path = path_of(inv["url"].as_str().unwrap());
    create_user(&app, &app.tenant.id, "late@shop.example", PASSWORD);
    let r = set_password_at(&DashClient::new(&app), &path, "yet another password");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("has an account already"), "{}", r.text());
    assert_eq!(DashClient::new(&app).get(&path).status, 200, "not spent");

    // CLI refusals name the fix.
    let run = app.cli(&[
        "user",
        "invite",
        "--tenant",
        &app.tenant.id,
        "new@shop.example",
    ]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("exists already"), "{}", run.stderr);
    let run = app.cli(&["user", "invite", "--tenant", "no-such", "x@shop.example"]);
    assert!(
        run.stderr.contains("no tenant with id no-such"),
        "{}",
        run.stderr
    );
}

#[test]
fn removing_a_user_ends_their_sessions_at_once() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, OWNER, PASSWORD);
    let b_id = create_user(&app, &app.tenant.id, "b@shop.example", PASSWORD);
    create_user(&app, &app.tenant.id, "c@shop.example", PASSWORD);
    let owner = DashClient::logged_in(&app, OWNER, PASSWORD);
    let b = DashClient::logged_in(&app, "b@shop.example", PASSWORD);
    let c = DashClient::logged_in(&app, "c@shop.example", PASSWORD);
    assert_eq!(b.get("/dashboard/").status, 200);

    let confirm = owner.page(&format!("/dashboard/settings/people/{b_id}/remove"));
    assert!(confirm.contains("b@shop.example"), "{confirm}");
    let r = owner.submit(&format!("/dashboard/settings/people/{b_id}/remove"), &[]);
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/settings/people?removed=1"))
    );
    let next = b.get("/dashboard/");
    assert_eq!(
        next.status, 303,
        "the removed user's next request is logged out"
    );
    assert!(next
        .header("location")
        .unwrap()
        .starts_with("/dashboard/login"));
    assert_eq!(b.login("b@shop.example", PASSWORD).status, 200, "no login");
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM web_sessions WHERE user_id = ?1",
            &[&b_id]
        ),
        0
    );

    // The operator's CLI: the same at once.
    let out = app.cli_json(&["user", "remove", "c@shop.example", "--json"]);
    assert_eq!(out["email"], "c@shop.example");
    assert_eq!(c.get("/dashboard/").status, 303);
    let run = app.cli(&["user", "remove", "c@shop.example"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("no user with email c@shop.example"),
        "{}",
        run.stderr
    );

    // The tenant's last user cannot remove themself.
    let owner_id: String = app
        .query_str("SELECT id FROM users WHERE email = ?1", &[&OWNER])
        .unwrap();
    let r = owner.submit(
        &format!("/dashboard/settings/people/{owner_id}/remove"),
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("last user"), "{}", r.text());
    assert_eq!(owner.get("/dashboard/").status, 200);
    // With a colleague, they can: logged out at once.
    create_user(&app, &app.tenant.id, "d@shop.example", PASSWORD);
    let r = owner.submit(
        &format!("/dashboard/settings/people/{owner_id}/remove"),
        &[],
    );
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/login"))
    );
    assert_eq!(owner.get("/dashboard/").status, 303);
    // A removal without the session's CSRF token changes nothing.
    let d = DashClient::logged_in(&app, "d@shop.example", PASSWORD);
    let d_id: String = app
        .query_str(
            "SELECT id FROM users WHERE email = ?1",
            &[&"d@shop.example"],
        )
        .unwrap();
    let forged = d.post_form(
        &format!("/dashboard/settings/people/{d_id}/remove"),
        &[("csrf", &"0".repeat(64))],
    );
    assert_eq!(forged.status, 403);
    assert_eq!(d.get("/dashboard/").status, 200);
}

#[test]
fn a_reset_link_works_once_and_expires() {
    let app = TestApp::start();
    let id = create_user(&app, &app.tenant.id, OWNER, PASSWORD);
    let elsewhere = DashClient::logged_in(&app, OWNER, PASSWORD);

    let link = app.cli_json(&["user", "reset-password", "Owner@Shop.example", "--json"]);
    assert_eq!(link["id"], id.as_str());
    let path = path_of(link["url"].as_str().unwrap());
    // Stored hashed: the token is nowhere in the database.
    let token = token_of(&path);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM user_tokens WHERE kind = 'reset' AND user_id = ?1",
            &[&id]
        ),
        1
    );
    assert!(!String::from_utf8_lossy(&app.db_text()).contains(&token));

    let c = DashClient::new(&app);
    let r = set_password_at(&c, &path, "a brand new password");
    assert_eq!((r.status, r.header("location")), (303, Some("/dashboard/")));
    assert_eq!(c.get("/dashboard/").status, 200, "logged in");
    assert_eq!(
        elsewhere.get("/dashboard/").status,
        303,
        "every other session ended"
    );
    assert_eq!(DashClient::new(&app).login(OWNER, PASSWORD).status, 200);
    DashClient::logged_in(&app, OWNER, "a brand new password");
    // Once.
    assert_eq!(DashClient::new(&app).get(&path).status, 404);
    let page = DashClient::new(&app).get("/dashboard/login").text();
    let csrf = DashClient::csrf_from(&page);
    let replay = c.post_form(
        "/dashboard/reset",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("password", "a third password!"),
            ("password_confirm", "a third password!"),
        ],
    );
    assert_eq!(replay.status, 404);

    // Expired: the row's expiry put in the past (as two hours later).
    let link = app.cli_json(&["user", "reset-password", OWNER, "--json"]);
    let path = path_of(link["url"].as_str().unwrap());
    let c = DashClient::new(&app);
    let page = c.page(&path);
    let csrf = DashClient::csrf_from(&page);
    let past = now_ms() - 1;
    assert_eq!(
        app.execute(
            "UPDATE user_tokens SET expires_at = ?1 WHERE kind = 'reset'",
            &[&past]
        ),
        1
    );
    assert_eq!(c.get(&path).status, 404);
    let late = c.post_form(
        "/dashboard/reset",
        &[
            ("csrf", &csrf),
            ("token", &token_of(&path)),
            ("password", "a third password!"),
            ("password_confirm", "a third password!"),
        ],
    );
    assert_eq!(late.status, 404);
    DashClient::logged_in(&app, OWNER, "a brand new password");

    // A new link replaces the earlier one.
    let first = path_of(
        app.cli_json(&["user", "reset-password", OWNER, "--json"])["url"]
            .as_str()
            .unwrap(),
    );
    let second = path_of(
        app.cli_json(&["user", "reset-password", OWNER, "--json"])["url"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(DashClient::new(&app).get(&first).status, 404);
    assert_eq!(DashClient::new(&app).get(&second).status, 200);
    let run = app.cli(&["user", "reset-password", "nobody@shop.example"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no user with email"), "{}", run.stderr);
}

#[test]
fn two_factor_is_required_after_enrolment_and_a_recovery_code_works_once() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, OWNER, PASSWORD);
    let c = DashClient::logged_in(&app, OWNER, PASSWORD);
    let (secret, codes) = enrol(&c);
    assert!(c.page("/dashboard/settings/people").contains("<td>on</td>"));
    let listed = app.cli_json(&["user", "list", "--json"]);
    assert_eq!(listed[0]["twoFactor"], true, "{listed}");

    // The password alone is no longer a login.
    let d = DashClient::new(&app);
    password_step(&d, OWNER);
    assert_eq!(d.get("/dashboard/").status, 303);
    assert_eq!(code_step(&d, "123456").status, 400);
    // The enrolment's code was accepted at this step: a code of the next step works.
    let code = code_at(&secret, unix_now() + 30).unwrap();
    let r = code_step(&d, &code);
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/")),
        "{}",
        r.text()
    );
    assert!(d.cookie("convapi_login").is_none());
    assert_eq!(d.get("/dashboard/").status, 200);
    // That code works once, even with a new password step.
    let e = DashClient::new(&app);
    password_step(&e, OWNER);
    assert_eq!(code_step(&e, &code).status, 400);

    // A recovery code works once.
    let r = code_step(&e, &codes[3].to_uppercase());
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(
        r.header("location"),
        Some("/dashboard/account?recovery_left=9")
    );
    assert!(e
        .page("/dashboard/account?recovery_left=9")
        .contains("9 left"));
    let f = DashClient::new(&app);
    password_step(&f, OWNER);
    assert_eq!(code_step(&f, &codes[3]).status, 400);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM user_tokens WHERE kind = 'recovery'",
            &[]
        ),
        9
    );

    // The second step expires; then the code page sends back to the login.
    app.execute(
        "UPDATE user_tokens SET expires_at = ?1 WHERE kind = 'login'",
        &[&(now_ms() - 1)],
    );
    let r = f.get("/dashboard/login/code");
    assert_eq!(r.header("location"), Some("/dashboard/login?step=expired"));

    // A password reset does not go around it: the reset lands at the code step.
    let link = app.cli_json(&["user", "reset-password", OWNER, "--json"]);
    let g = DashClient::new(&app);
    let r = set_password_at(&g, &path_of(link["url"].as_str().unwrap()), PASSWORD);
    assert_eq!(r.status, 303);
    assert!(
        r.header("location")
            .unwrap()
            .starts_with("/dashboard/login/code"),
        "{:?}",
        r.header("location")
    );
    assert!(g.cookie("convapi_session").is_none());
    assert_eq!(
        c.get("/dashboard/").status,
        303,
        "the reset ended every session"
    );
    let c = DashClient::new(&app);
    password_step(&c, OWNER);
    assert_eq!(code_step(&c, &codes[5]).status, 303);

    // Off with a current code (a recovery code here); a wrong one changes nothing.
    let wrong = c.submit(
        "/dashboard/account/two-factor/disable",
        &[("code", "000000")],
    );
    assert_eq!(wrong.status, 400);
    let off = c.submit(
        "/dashboard/account/two-factor/disable",
        &[("code", &codes[0])],
    );
    assert_eq!(
        off.header("location"),
        Some("/dashboard/account?two_factor=off")
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM user_tokens WHERE kind = 'recovery'",
            &[]
        ),
        0
    );
    DashClient::logged_in(&app, OWNER, PASSWORD);
}

#[test]
fn wrong_codes_are_throttled_like_passwords() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, OWNER, PASSWORD);
    let c = DashClient::logged_in(&app, OWNER, PASSWORD);
    let (secret, _) = enrol(&c);
    let d = DashClient::new(&app);
    password_step(&d, OWNER);
    for i in 0..5 {
        assert_eq!(code_step(&d, "000000").status, 400, "wrong code {i}");
    }
    let right = code_at(&secret, unix_now() + 30).unwrap();
    let r = code_step(&d, &right);
    assert_eq!(
        r.status,
        429,
        "over the limit, even the right code: {}",
        r.text()
    );
    assert!(r.header("retry-after").is_some());
    // A right password (which clears the password's failures) does not clear the codes'.
    let e = DashClient::new(&app);
    password_step(&e, OWNER);
    assert_eq!(code_step(&e, &right).status, 429);
    // Turning it off from the session is throttled by the same counter.
    assert_eq!(
        c.submit("/dashboard/account/two-factor/disable", &[("code", &right)])
            .status,
        429
    );
}

#[test]
fn another_tenants_people_are_a_404() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, OWNER, PASSWORD);
    let other = app.create_tenant("Other shop");
    let theirs = create_user(&app, &other.id, "them@other.example", PASSWORD);
    let c = DashClient::logged_in(&app, OWNER, PASSWORD);
    assert!(!c
        .page("/dashboard/settings/people")
        .contains("them@other.example"));
    let path = format!("/dashboard/settings/people/{theirs}/remove");
    assert_eq!(c.get(&path).status, 404);
    assert_eq!(c.submit(&path, &[]).status, 404);
    assert_eq!(
        c.get("/dashboard/settings/people/not-a-uuid/remove").status,
        404
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM users WHERE id = ?1", &[&theirs]),
        1
    );
    DashClient::logged_in(&app, "them@other.example", PASSWORD);
    // An invitation from the dashboard is into the viewer's tenant, whatever the form says.
    let made = c.submit(
        "/dashboard/settings/people",
        &[("email", "x@shop.example"), ("tenant", &other.id)],
    );
    assert_eq!(made.status, 200);
    assert_eq!(
        app.query_str(
            "SELECT tenant_id FROM user_tokens WHERE email = ?1",
            &[&"x@shop.example"]
        ),
        Some(app.tenant.id.clone())
    );
}

#[test]
fn every_people_form_refuses_a_wrong_csrf_token() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, OWNER, PASSWORD);
    let c = DashClient::logged_in(&app, OWNER, PASSWORD);
    let forged = "0".repeat(64);
    for path in [
        "/dashboard/settings/people",
        "/dashboard/account/two-factor/start",
        "/dashboard/account/two-factor/confirm",
        "/dashboard/account/two-factor/disable",
    ] {
        let r = c.post_form(
            path,
            &[
                ("csrf", &forged),
                ("email", "x@shop.example"),
                ("code", "000000"),
            ],
        );
        assert_eq!(r.status, 403, "{path}");
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM user_tokens", &[]), 0);
    let pending: Option<String> =
        app.query_str("SELECT totp_pending FROM users WHERE email = ?1", &[&OWNER]);
    assert_eq!(pending, None);
    // The forms without a session: their double-submit cookie must match.
    let inv = app.cli_json(&[
        "user",
        "invite",
        "--tenant",
        &app.tenant.id,
        "new@shop.example",
        "--json",
    ]);
    let reset = app.cli_json(&["user", "reset-password", OWNER, "--json"]);
    let d = DashClient::new(&app);
    d.get("/dashboard/login");
    for (action, url) in [
        ("/dashboard/invite", &inv["url"]),
        ("/dashboard/reset", &reset["url"]),
    ] {
        let token = token_of(url.as_str().unwrap());
        let r = d.post_form(
            action,
            &[
                ("csrf", &forged),
                ("token", &token),
                ("password", "a password long enough"),
                ("password_confirm", "a password long enough"),
            ],
        );
        assert_eq!(r.status, 403, "{action}");
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM users", &[]), 1);
    DashClient::logged_in(&app, OWNER, PASSWORD);
}
