//! grove's own reads stay inside the repository (issue 42): a rules file committed as a
//! symbolic link out of the work tree (`AGENTS.md -> ~/.netrc`) is refused as a link,
//! naming where it points, and what it points to never reaches a model; a link that
//! stays inside (`AGENTS.md -> docs/house-rules.md`) is read as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::fake_server::FakeServer;
use crate::support::git_fixture::GitFixture;
use crate::support::grove::grove_in;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{lead_reply, reviewer_reply, worker_reply};
use pretty_assertions::assert_eq;

/// What stands for the user's credentials, in the fixture's scratch home.
const CANARY: &str = "machine api.example.com login me password CANARY-NETRC-7c41";
const RULES: &str = "House rule: RULES-IN-REPO keep lines short.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_file_linking_out_of_the_repository_never_reaches_a_model() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n")]);
    let netrc = fixture.home().join(".netrc");
    std::fs::write(&netrc, CANARY).unwrap();
    std::os::unix::fs::symlink(&netrc, fixture.repo.join("AGENTS.md")).unwrap();
    fixture.commit_all("rules, as a link");
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/a.txt ALPHA", None)]),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;

    let refused = grove_in(&fixture, Some(&server), &["run", "--json", "shout"]).await;
    let rules_path = fixture.repo.canonicalize().unwrap().join("AGENTS.md");
    let leaked = |server: &FakeServer| {
        server
            .requests()
            .iter()
            .filter(|request| request.raw_body.contains("CANARY-NETRC"))
            .count()
    };
    assert_eq!(
        (
            refused.status.code(),
            String::from_utf8_lossy(&refused.stderr)
                .trim_end()
                .to_owned(),
            server.requests().len(),
            leaked(&server),
        ),
        (
            Some(1),
            format!(
                "grove: cannot read the project rules {}: it is a symbolic link to {}, outside \
                 the repository; grove reads no file outside the repository's work tree",
                rules_path.display(),
                netrc.display()
            ),
            0,
            0
        ),
        "a rules file that links out of the repository stops the run, named as a link with \
         its target, before any model is asked"
    );

    // The same file as a link that stays in the work tree is read, as every role's rules.
    std::fs::remove_file(fixture.repo.join("AGENTS.md")).unwrap();
    fixture.write("docs/house-rules.md", RULES);
    std::os::unix::fs::symlink("docs/house-rules.md", fixture.repo.join("AGENTS.md")).unwrap();
    fixture.commit_all("rules, linked inside");
    let ran = grove_in(&fixture, Some(&server), &["run", "--json", "shout"]).await;
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let requests = server.requests();
    let roles_with_rules: Vec<(Who, bool)> = [Who::Lead, Who::Worker, Who::Reviewer]
        .into_iter()
        .map(|role| {
            let of_role: Vec<_> = requests.iter().filter(|r| who(r) == role).collect();
            let all =
                !of_role.is_empty() && of_role.iter().all(|r| r.system_text().contains(RULES));
            (role, all)
        })
        .collect();
    assert_eq!(
        (roles_with_rules, leaked(&server)),
        (
            vec![
                (Who::Lead, true),
                (Who::Worker, true),
                (Who::Reviewer, true)
            ],
            0
        ),
        "a link inside the work tree is followed: every role's prompt holds the rules, and \
         the secret is in none"
    );
}
