//! Base URLs of model APIs: turning one into the endpoint a client posts to, and keeping
//! the credentials a URL may carry (`http://user:password@host`) out of every text grove
//! shows or records.
//!
//! This module owns [`redact_userinfo`], the one function that hides a URL's userinfo;
//! every URL that reaches an error, an event, the journal or `state.json` passes through
//! it. It never sends anything.

use std::sync::LazyLock;

use regex::Regex;

use super::ModelError;

/// What replaces the userinfo of a shown URL.
const HIDDEN: &str = "***";

/// Where a client posts: the URL it sends to (userinfo kept, reqwest turns it into a
/// basic-auth header) and the same URL as shown to people (userinfo hidden).
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    pub send: reqwest::Url,
    pub shown: String,
}

/// The endpoint `path` (e.g. `/v1/messages`) under `base`, read from `variable`.
///
/// The base must be http(s). Its path gets `path` appended (trailing slashes dropped);
/// a query (`?api-version=1`, as some gateways need) is kept and sent with every
/// request; a fragment (`#f`) is refused, since it is never sent to any server and
/// a URL with one was most likely pasted by mistake.
pub(super) fn endpoint(base: &str, path: &str, variable: &str) -> Result<Endpoint, ModelError> {
    let trimmed = base.trim();
    let mut url = reqwest::Url::parse(trimmed).map_err(|err| {
        ModelError::Config(format!(
            "{variable} is not a valid URL ({:?}): {err}",
            redact_userinfo(trimmed)
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ModelError::Config(format!(
            "{variable} must be an http:// or https:// URL, got {:?}",
            redact_userinfo(trimmed)
        )));
    }
    if let Some(fragment) = url.fragment() {
        return Err(ModelError::Config(format!(
            "{variable} ends in a fragment (#{fragment}), which is never sent to a server: \
             remove it from {:?}",
            redact_userinfo(trimmed)
        )));
    }
    let joined = format!("{}{path}", url.path().trim_end_matches('/'));
    url.set_path(&joined);
    let shown = redact_userinfo(url.as_str());
    Ok(Endpoint { send: url, shown })
}

/// `text` with the userinfo of every URL in it replaced by `***`
/// (`http://user:pw@host/v1` becomes `http://***@host/v1`).
///
/// Works on whole messages as well as on single URLs, so error text that quotes a URL
/// (a transport error, a server's echo) is safe to show too.
pub fn redact_userinfo(text: &str) -> String {
    static USERINFO: LazyLock<Option<Regex>> = LazyLock::new(|| {
        // scheme://  then userinfo up to the last `@` before the host; a userinfo never
        // holds `/`, `?`, `#` or whitespace.
        Regex::new(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s@]*@").ok()
    });
    match USERINFO.as_ref() {
        Some(pattern) => pattern
            .replace_all(text, format!("${{1}}{HIDDEN}@").as_str())
            .into_owned(),
        // The pattern is a constant that compiles; never reached.
        None => text.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_hidden_in_urls_and_in_messages() {
        let cases = [
            ("http://user:pw@host:8080/v1", "http://***@host:8080/v1"),
            (
                "https://token@api.example.com",
                "https://***@api.example.com",
            ),
            (
                "could not reach http://u:p%40ss@127.0.0.1/v1/chat: refused",
                "could not reach http://***@127.0.0.1/v1/chat: refused",
            ),
            ("http://host/v1?to=a@b", "http://host/v1?to=a@b"),
            ("no url here: a@b", "no url here: a@b"),
            ("http://host/path", "http://host/path"),
        ];
        let actual: Vec<(&str, String)> = cases
            .iter()
            .map(|(text, _)| (*text, redact_userinfo(text)))
            .collect();
        let expected: Vec<(&str, String)> = cases
            .iter()
            .map(|(text, shown)| (*text, (*shown).to_owned()))
            .collect();
        assert_eq!(
            actual, expected,
            "userinfo never survives, nothing else changes"
        );
    }

    #[test]
    fn endpoints_keep_the_query_and_refuse_a_fragment() {
        let shown = |base: &str| {
            let endpoint = endpoint(base, "/chat/completions", "OPENAI_BASE_URL").unwrap();
            (endpoint.send.to_string(), endpoint.shown)
        };
        assert_eq!(
            shown("http://127.0.0.1:8080/v1/"),
            (
                "http://127.0.0.1:8080/v1/chat/completions".to_owned(),
                "http://127.0.0.1:8080/v1/chat/completions".to_owned()
            )
        );
        assert_eq!(
            shown("http://gw.example/openai/v1?api-version=2&q=1"),
            (
                "http://gw.example/openai/v1/chat/completions?api-version=2&q=1".to_owned(),
                "http://gw.example/openai/v1/chat/completions?api-version=2&q=1".to_owned()
            ),
            "the query follows the endpoint path"
        );
        assert_eq!(
            shown("http://user:pw@host/v1"),
            (
                "http://user:pw@host/v1/chat/completions".to_owned(),
                "http://***@host/v1/chat/completions".to_owned()
            ),
            "the password is sent, never shown"
        );
        let err = endpoint("http://u:pw@host/v1?q=1#f", "/x", "OPENAI_BASE_URL")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("fragment") && err.contains("OPENAI_BASE_URL") && !err.contains("pw"),
            "a fragment is refused by name, without the password: {err}"
        );
        let err = endpoint("ftp://u:pw@host", "/x", "X")
            .unwrap_err()
            .to_string();
        assert!(err.contains("http") && !err.contains("pw"), "{err}");
    }
}
