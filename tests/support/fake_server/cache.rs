//! Anthropic's prompt cache as its documentation describes it, played on the fake
//! server's clock (which a test advances instead of waiting):
//!
//! - A request's prefix runs tools → system → messages; every block marked
//!   `cache_control` is a breakpoint (at most 4, checked by the validator), and its
//!   entry is the whole prefix up to and including that block.
//! - A lookup reads the longest prefix with a live entry, trying each breakpoint and up
//!   to 20 block boundaries before it ([`LOOKBACK_BLOCKS`]); a hit refreshes the entry's
//!   time to live.
//! - Each breakpoint past that hit writes an entry when its prefix is at least the
//!   model's minimum cacheable length ([`minimum_tokens`]) — but only once the response
//!   has begun ([`PromptCache::commit`]): a request processed before then misses.
//! - `"ttl": "1h"` lives an hour, the default five minutes; a 1-hour breakpoint after a
//!   5-minute one is refused with a 400, as the API does.
//! - Usage follows: `cache_read_input_tokens` is the hit; the writes are split as the
//!   API bills them (prefix up to the last 1-hour breakpoint written at 1 hour, the rest
//!   up to the last breakpoint written at 5 minutes) into `cache_creation`'s
//!   `ephemeral_1h_input_tokens` and `ephemeral_5m_input_tokens`, whose sum is
//!   `cache_creation_input_tokens`; `input_tokens` is what lies after the last
//!   breakpoint, or all of it below the minimum.
//!
//! Tokens are counted as the fake's one approximation: a block's JSON (without its
//! `cache_control`) in characters, divided by 4, rounded up ([`tokens`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How many block boundaries before a breakpoint a lookup tries.
pub const LOOKBACK_BLOCKS: usize = 20;

/// The fake server's clock: real time plus whatever a test advanced it by.
#[derive(Debug)]
pub struct FakeClock {
    start: Instant,
    advanced: Mutex<Duration>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            advanced: Mutex::new(Duration::ZERO),
        }
    }
}

impl FakeClock {
    /// The time since the server started, advances included.
    pub fn now(&self) -> Duration {
        self.start.elapsed() + *self.advanced.lock().unwrap()
    }

    /// Moves the clock `by` forward at once (a 5-minute wait without waiting).
    pub fn advance(&self, by: Duration) {
        *self.advanced.lock().unwrap() += by;
    }
}

/// A breakpoint's time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    FiveMinutes,
    OneHour,
}

impl Ttl {
    fn duration(self) -> Duration {
        match self {
            Ttl::FiveMinutes => Duration::from_secs(5 * 60),
            Ttl::OneHour => Duration::from_secs(60 * 60),
        }
    }
}

/// The fake's token count of `text`: characters / 4, rounded up.
pub fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The shortest prefix the API caches for `model`, in tokens, from its documentation's
/// table (a name it does not list gets the most common minimum, 1024).
pub fn minimum_tokens(model: &str) -> u64 {
    let model = model.to_ascii_lowercase();
    if ["opus-4-5", "opus-4-6", "haiku-4-5"]
        .iter()
        .any(|name| model.contains(name))
    {
        4096
    } else if ["haiku-3", "3-haiku", "3-5-haiku", "sonnet-4-6"]
        .iter()
        .any(|name| model.contains(name))
    {
        2048
    } else {
        1024
    }
}

/// One block of a request, in cache order.
#[derive(Debug, Clone, PartialEq)]
struct Block {
    tokens: u64,
    /// A hash of the model and every block up to and including this one.
    prefix: u64,
    breakpoint: Option<Ttl>,
}

/// What one request's lookup found, and the writes its response will make.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lookup {
    pub input: u64,
    pub read: u64,
    pub write_5m: u64,
    pub write_1h: u64,
    /// Entries to write once the response has begun: (prefix hash, time to live).
    writes: Vec<(u64, Ttl)>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ttl: Ttl,
    /// On the server's clock.
    expires: Duration,
}

/// The cache of one fake server (one organization, one model each entry).
#[derive(Debug, Default)]
pub struct PromptCache {
    entries: HashMap<u64, Entry>,
}

impl PromptCache {
    /// Looks `body` (a Messages API request) up at `now`: what it reads, what it will
    /// write, and its usage. An error is the API's 400 message.
    pub fn lookup(&mut self, body: &Value, now: Duration) -> Result<Lookup, String> {
        let blocks = blocks(body)?;
        let minimum = minimum_tokens(body["model"].as_str().unwrap_or(""));
        let mut ends = Vec::with_capacity(blocks.len());
        let mut total = 0u64;
        for block in &blocks {
            total += block.tokens;
            ends.push(total);
        }
        let breakpoints: Vec<usize> = (0..blocks.len())
            .filter(|&index| blocks[index].breakpoint.is_some())
            .collect();
        let mut read = 0u64;
        let mut hit = None;
        for &point in &breakpoints {
            let earliest = point.saturating_sub(LOOKBACK_BLOCKS);
            for index in (earliest..=point).rev() {
                let live = self
                    .entries
                    .get(&blocks[index].prefix)
                    .is_some_and(|entry| entry.expires > now);
                if live && ends[index] > read {
                    read = ends[index];
                    hit = Some(blocks[index].prefix);
                    break;
                }
            }
        }
        if let Some(prefix) = hit
            && let Some(entry) = self.entries.get_mut(&prefix)
        {
            entry.expires = now + entry.ttl.duration();
        }
        let mut lookup = Lookup {
            read,
            ..Lookup::default()
        };
        let (mut one_hour_end, mut last_end) = (read, read);
        for &point in &breakpoints {
            let ttl = blocks[point].breakpoint.unwrap_or(Ttl::FiveMinutes);
            if ends[point] <= read || ends[point] < minimum {
                continue;
            }
            lookup.writes.push((blocks[point].prefix, ttl));
            last_end = ends[point];
            if ttl == Ttl::OneHour {
                one_hour_end = ends[point];
            }
        }
        lookup.write_1h = one_hour_end - read;
        lookup.write_5m = last_end - one_hour_end;
        lookup.input = total - last_end;
        Ok(lookup)
    }

    /// The response to `lookup`'s request has begun at `now`: its entries exist.
    pub fn commit(&mut self, lookup: &Lookup, now: Duration) {
        for &(prefix, ttl) in &lookup.writes {
            let entry = self.entries.entry(prefix).or_insert(Entry {
                ttl,
                expires: Duration::ZERO,
            });
            if ttl == Ttl::OneHour {
                entry.ttl = Ttl::OneHour;
            }
            entry.expires = entry.expires.max(now + ttl.duration());
        }
    }
}

/// The request's blocks in cache order: each tool, each system block, each message's
/// content blocks (a string content is one block).
fn blocks(body: &Value) -> Result<Vec<Block>, String> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body["model"].as_str().unwrap_or("").hash(&mut hasher);
    let mut out = Vec::new();
    let mut push = |block: &Value, out: &mut Vec<Block>| -> Result<(), String> {
        let breakpoint = match block.get("cache_control") {
            None => None,
            Some(control) => Some(match control.get("ttl").map(|ttl| ttl.as_str()) {
                None | Some(Some("5m")) => Ttl::FiveMinutes,
                Some(Some("1h")) => Ttl::OneHour,
                Some(other) => {
                    return Err(format!(
                        "cache_control.ttl: Input should be '5m' or '1h', got {other:?}"
                    ));
                }
            }),
        };
        let mut bare = block.clone();
        if let Some(object) = bare.as_object_mut() {
            object.remove("cache_control");
        }
        let text = match &bare {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        text.hash(&mut hasher);
        out.push(Block {
            tokens: tokens(&text),
            prefix: hasher.clone().finish(),
            breakpoint,
        });
        Ok(())
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push(tool, &mut out)?;
    }
    match &body["system"] {
        Value::String(text) => push(&Value::String(text.clone()), &mut out)?,
        Value::Array(system) => {
            for block in system {
                push(block, &mut out)?;
            }
        }
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        match &message["content"] {
            Value::Array(content) => {
                for block in content {
                    push(block, &mut out)?;
                }
            }
            other => push(other, &mut out)?,
        }
    }
    let mut five_minutes_seen = false;
    for block in &out {
        match block.breakpoint {
            Some(Ttl::FiveMinutes) => five_minutes_seen = true,
            Some(Ttl::OneHour) if five_minutes_seen => {
                return Err(
                    "a cache_control block with ttl='1h' must not come after one with \
                     ttl='5m' (in the order tools, system, messages)"
                        .to_owned(),
                );
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A text of `n` fake tokens.
    fn text(n: usize) -> String {
        "abcd".repeat(n)
    }

    /// A request: a tool and a system prompt of `shared` tokens each (breakpoints on
    /// both), then a user message of 100 tokens (its breakpoint too), all at `ttl`.
    fn request(shared: usize, brief: &str, ttl: Option<&str>) -> Value {
        let mut control = json!({"type": "ephemeral"});
        if let Some(ttl) = ttl {
            control["ttl"] = json!(ttl);
        }
        json!({
            "model": "claude-sonnet-4-5",
            "tools": [{"name": "t", "input_schema": {"type": "object"}, "description": text(shared), "cache_control": control}],
            "system": [{"type": "text", "text": text(shared), "cache_control": control}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": format!("{brief}{}", text(100)), "cache_control": control}]}],
        })
    }

    fn figures(lookup: &Lookup) -> (u64, u64, u64, u64) {
        (lookup.input, lookup.read, lookup.write_5m, lookup.write_1h)
    }

    #[test]
    fn an_entry_exists_only_once_its_response_has_begun() {
        let mut cache = PromptCache::default();
        let first = cache
            .lookup(&request(600, "a", None), Duration::ZERO)
            .unwrap();
        let total = first.input + first.write_5m;
        assert_eq!(first.read, 0, "a cold cache reads nothing");
        assert!(
            first.write_5m >= 1200,
            "the whole prefix is written: {first:?}"
        );
        assert_eq!(
            first.input, 0,
            "a breakpoint on the last block leaves no input"
        );
        let concurrent = cache
            .lookup(&request(600, "b", None), Duration::ZERO)
            .unwrap();
        assert_eq!(
            concurrent.read, 0,
            "a sibling processed before the first response began misses"
        );
        cache.commit(&first, Duration::from_secs(1));
        let after = cache
            .lookup(&request(600, "b", None), Duration::from_secs(2))
            .unwrap();
        let tool =
            json!({"name": "t", "input_schema": {"type": "object"}, "description": text(600)});
        let system = json!({"type": "text", "text": text(600)});
        let shared = tokens(&tool.to_string()) + tokens(&system.to_string());
        assert_eq!(
            figures(&after),
            (0, shared, total - shared, 0),
            "a sibling after it reads tools and system, writes its own brief"
        );
    }

    #[test]
    fn a_prefix_below_the_minimum_is_not_cached() {
        let mut cache = PromptCache::default();
        let small = cache
            .lookup(&request(100, "a", None), Duration::ZERO)
            .unwrap();
        assert_eq!(
            (small.read, small.write_5m, small.write_1h),
            (0, 0, 0),
            "{small:?}"
        );
        assert!(small.input > 300, "all of it is input: {small:?}");
        assert_eq!(minimum_tokens("claude-haiku-4-5"), 4096);
        assert_eq!(minimum_tokens("claude-3-5-haiku-latest"), 2048);
        assert_eq!(minimum_tokens("claude-sonnet-4-5"), 1024);
    }

    #[test]
    fn five_minute_entries_expire_and_reads_refresh_them_one_hour_entries_outlive_them() {
        let mut cache = PromptCache::default();
        let minute = Duration::from_secs(60);
        let first = cache
            .lookup(&request(600, "a", None), Duration::ZERO)
            .unwrap();
        cache.commit(&first, Duration::ZERO);
        let read = cache.lookup(&request(600, "a", None), 4 * minute).unwrap();
        assert!(read.read > 0, "read within 5 minutes");
        let refreshed = cache.lookup(&request(600, "a", None), 8 * minute).unwrap();
        assert!(
            refreshed.read > 0,
            "the read at 4 minutes refreshed it: {refreshed:?}"
        );
        let gone = cache.lookup(&request(600, "a", None), 14 * minute).unwrap();
        assert_eq!(gone.read, 0, "6 minutes without a read: gone");

        let mut cache = PromptCache::default();
        let long = cache
            .lookup(&request(600, "a", Some("1h")), Duration::ZERO)
            .unwrap();
        assert_eq!(long.write_5m, 0);
        assert!(long.write_1h >= 1200, "{long:?}");
        cache.commit(&long, Duration::ZERO);
        let later = cache
            .lookup(&request(600, "a", Some("1h")), 50 * minute)
            .unwrap();
        assert_eq!(
            figures(&later),
            (0, long.write_1h, 0, 0),
            "a 1-hour entry is read after 50 minutes"
        );
        let expired = cache
            .lookup(&request(600, "a", None), 111 * minute)
            .unwrap();
        assert_eq!(expired.read, 0, "an hour after its last read it is gone");
    }

    #[test]
    fn writes_split_by_ttl_and_a_one_hour_breakpoint_after_a_five_minute_one_is_refused() {
        let mut cache = PromptCache::default();
        let mut body = request(600, "a", Some("1h"));
        body["messages"][0]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        let mixed = cache.lookup(&body, Duration::ZERO).unwrap();
        assert!(mixed.write_1h >= 1200 && mixed.write_5m >= 100, "{mixed:?}");
        body["tools"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "5m"});
        body["messages"][0]["content"][0]["cache_control"] =
            json!({"type": "ephemeral", "ttl": "1h"});
        let error = cache.lookup(&body, Duration::ZERO).unwrap_err();
        assert!(error.contains("must not come after"), "{error}");
        body["tools"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "2h"});
        assert!(cache.lookup(&body, Duration::ZERO).is_err(), "2h is no TTL");
    }

    #[test]
    fn a_lookup_finds_an_entry_up_to_20_blocks_before_a_breakpoint() {
        let mut cache = PromptCache::default();
        let mut messages: Vec<Value> = (0..30)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": [{"type": "text", "text": format!("{i}{}", text(100))}]}))
            .collect();
        let mut body = json!({"model": "m", "messages": messages.clone()});
        body["messages"][10]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        let first = cache.lookup(&body, Duration::ZERO).unwrap();
        cache.commit(&first, Duration::ZERO);
        let written = first.write_5m;
        for (last, hits) in [(29, true), (31, false)] {
            messages.truncate(30);
            while messages.len() <= last {
                messages.push(
                    json!({"role": "user", "content": [{"type": "text", "text": text(100)}]}),
                );
            }
            let mut later = json!({"model": "m", "messages": messages.clone()});
            later["messages"][last]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
            let found = cache.lookup(&later, Duration::ZERO).unwrap();
            assert_eq!(
                found.read == written,
                hits,
                "a breakpoint {} blocks after the entry {} it",
                last - 10,
                if hits { "finds" } else { "does not find" }
            );
        }
    }
}
