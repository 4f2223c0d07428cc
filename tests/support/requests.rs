//! Reading the requests the fake model server recorded: whose request it was.

use super::fake_server::RecordedRequest;

/// The role that sent `request`, from its system prompt: `lead`, `reviewer` or `worker`.
pub fn role(request: &RecordedRequest) -> &'static str {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        "lead"
    } else if system.starts_with("You are an independent code reviewer") {
        "reviewer"
    } else {
        "worker"
    }
}
