//! The demo's sample repository: a tiny Python shop whose three modules still call a
//! deprecated `log_old(...)` helper, its tests and the `[check]` that runs them, plus the
//! house rules the reviewer enforces.
//!
//! This module owns the sample's files and the edits the replay applies to them. It
//! writes only inside the directory it is given and never writes git configuration; the
//! one commit is made in process with a fixed identity and date, so no user setting shapes it.

use std::path::{Path, PathBuf};

use super::DemoError;

/// The task the demo gives the lead, as a user would type it.
pub const TASK: &str = "Replace the deprecated log_old(...) calls in shop/ with the module's \
standard logger, log.info(...), and drop the log_old imports.";

/// The project rules of the sample, read by every role from `AGENTS.md`.
pub const AGENTS_MD: &str = "\
# House rules

- Log through the module's standard logger: `log = logging.getLogger(__name__)`, then
  `log.info(...)`. `shop.compat.log_old` is deprecated.
- Never leave `print(...)` debugging in committed code.
";

/// The helper every module should stop using.
const COMPAT_PY: &str = r#""""The old logging helper, kept until every caller uses the standard logger."""

import sys


def log_old(message):
    """Deprecated: use logging.getLogger(__name__).info instead."""
    sys.stderr.write(message + "\n")
"#;

const ORDERS_PY: &str = r#""""Orders: placing and cancelling them."""

import logging

from shop.compat import log_old

log = logging.getLogger(__name__)


def place_order(order_id, items):
    log_old(f"placing order {order_id} with {len(items)} items")
    return {"id": order_id, "items": list(items), "status": "placed"}


def cancel_order(order):
    log_old(f"cancelling order {order['id']}")
    return {**order, "status": "cancelled"}
"#;

const PAYMENTS_PY: &str = r#""""Payments: charging and refunding orders."""

import logging

from shop.compat import log_old

log = logging.getLogger(__name__)


def charge(order_id, amount_cents):
    log_old(f"charging {amount_cents} cents for order {order_id}")
    return {"order": order_id, "amount_cents": amount_cents, "state": "charged"}


def refund(payment):
    log_old(f"refunding order {payment['order']}")
    return {**payment, "state": "refunded"}
"#;

const SHIPPING_PY: &str = r#""""Shipping: labels and dispatch."""

import logging

from shop.compat import log_old

log = logging.getLogger(__name__)


def ship(order, address):
    log_old(f"shipping order {order['id']} to {address}")
    return {**order, "status": "shipped", "address": address}
"#;

const README_MD: &str = "\
# shop

A tiny sample shop, created by `grove demo`. Its modules still log through the
deprecated `shop.compat.log_old`; the demo's task moves them to the standard logger.
`python3 -m unittest` runs its tests (the `[check]` in `.grove/config.toml`).
";

/// The shop's tests, which the sample's `[check]` runs on each subtask and the result.
const TEST_SHOP_PY: &str = r#""""The shop's tests: `python3 -m unittest` runs them (the sample's [check])."""

import unittest

from shop.orders import cancel_order, place_order
from shop.payments import charge, refund
from shop.shipping import ship


class ShopTest(unittest.TestCase):
    def test_an_order_is_placed_then_cancelled(self):
        order = place_order(7, ["tea"])
        self.assertEqual(order["status"], "placed")
        self.assertEqual(cancel_order(order)["status"], "cancelled")

    def test_a_charge_is_refunded(self):
        self.assertEqual(refund(charge(7, 450))["state"], "refunded")

    def test_an_order_ships_to_its_address(self):
        self.assertEqual(ship({"id": 7}, "1 Main St")["address"], "1 Main St")
"#;

/// The command of the sample's `[check]`.
pub const CHECK_COMMAND: &str = "python3 -B -m unittest -q";

/// The sample's grove settings: its check.
const CONFIG_TOML: &str = r#"# grove's settings for this sample (`grove init` writes every key, commented).

# The project's check: run on each subtask's worktree (evidence for its reviewer) and on
# the merged result before the branch moves.
[check]
command = "python3 -B -m unittest -q"
timeout_s = 120
"#;

/// Every file of the sample, path and content.
pub const FILES: &[(&str, &str)] = &[
    (".grove/config.toml", CONFIG_TOML),
    ("AGENTS.md", AGENTS_MD),
    ("README.md", README_MD),
    ("shop/__init__.py", ""),
    ("shop/compat.py", COMPAT_PY),
    ("shop/orders.py", ORDERS_PY),
    ("shop/payments.py", PAYMENTS_PY),
    ("shop/shipping.py", SHIPPING_PY),
    ("test_shop.py", TEST_SHOP_PY),
];

/// One `edit_file` call of the replayed worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edit {
    pub old: &'static str,
    pub new: &'static str,
    pub replace_all: bool,
}

/// A file the lead hands to one worker, and what that worker does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub path: &'static str,
    /// The edits, in order; the last one of a stray target is the one the reviewer rejects.
    pub edits: &'static [Edit],
    /// A line the worker adds that the task did not ask for, or `None`.
    pub stray_line: Option<&'static str>,
}

const DROP_IMPORT: Edit = Edit {
    old: "from shop.compat import log_old\n\n",
    new: "",
    replace_all: false,
};

const USE_LOGGER: Edit = Edit {
    old: "log_old(",
    new: "log.info(",
    replace_all: true,
};

/// The debugging line the payments worker leaves behind.
pub const STRAY_LINE: &str = "    print(\"DEBUG charge\", order_id, amount_cents)";

const ADD_STRAY: Edit = Edit {
    old: "def charge(order_id, amount_cents):\n",
    new: "def charge(order_id, amount_cents):\n    print(\"DEBUG charge\", order_id, amount_cents)\n",
    replace_all: false,
};

/// The three subtasks, one per module; the payments worker oversteps.
pub const TARGETS: &[Target] = &[
    Target {
        path: "shop/orders.py",
        edits: &[DROP_IMPORT, USE_LOGGER],
        stray_line: None,
    },
    Target {
        path: "shop/payments.py",
        edits: &[DROP_IMPORT, USE_LOGGER, ADD_STRAY],
        stray_line: Some(STRAY_LINE),
    },
    Target {
        path: "shop/shipping.py",
        edits: &[DROP_IMPORT, USE_LOGGER],
        stray_line: None,
    },
];

impl Target {
    /// The file as the sample commits it.
    pub fn original(&self) -> &'static str {
        FILES
            .iter()
            .find(|(path, _)| *path == self.path)
            .map_or("", |(_, content)| *content)
    }

    /// The file after the worker's edits, computed the way `edit_file` applies them.
    pub fn edited(&self) -> String {
        let mut text = self.original().to_owned();
        for edit in self.edits {
            text = if edit.replace_all {
                text.replace(edit.old, edit.new)
            } else {
                text.replacen(edit.old, edit.new, 1)
            };
        }
        text
    }

    /// The 1-based line of the stray line in the edited file.
    pub fn stray_line_number(&self) -> Option<usize> {
        let stray = self.stray_line?;
        self.edited()
            .lines()
            .position(|line| line == stray)
            .map(|index| index + 1)
    }
}

/// Identity of the sample's one commit; fixed so every demo starts from the same tree.
const AUTHOR_NAME: &str = "grove demo";
const AUTHOR_EMAIL: &str = "demo@grove.invalid";
/// 2026-01-01T00:00:00Z.
const COMMIT_TIME: i64 = 1_767_225_600;

/// Writes the sample into `dir` (created if missing; must be empty), makes it a git
/// repository on `main` with one commit, and returns its canonical path.
pub async fn write_sample(dir: &Path) -> Result<PathBuf, DemoError> {
    let owned = dir.to_path_buf();
    tokio::task::spawn_blocking(move || write_sample_blocking(&owned))
        .await
        .map_err(|error| DemoError::Sample {
            path: dir.to_path_buf(),
            action: "write the sample",
            reason: error.to_string(),
        })?
}

fn write_sample_blocking(dir: &Path) -> Result<PathBuf, DemoError> {
    let io_error = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error: std::io::Error| DemoError::Sample {
            path,
            action,
            reason: error.to_string(),
        }
    };
    std::fs::create_dir_all(dir).map_err(io_error("create the directory", dir))?;
    let mut entries = std::fs::read_dir(dir).map_err(io_error("list the directory", dir))?;
    if entries.next().is_some() {
        return Err(DemoError::DirNotEmpty {
            path: dir.to_path_buf(),
        });
    }
    let root = dir
        .canonicalize()
        .map_err(io_error("resolve the directory", dir))?;
    for (path, content) in FILES {
        let file = root.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io_error("create a directory", parent))?;
        }
        std::fs::write(&file, content).map_err(io_error("write a file", &file))?;
    }
    commit_sample(&root).map_err(|error| DemoError::Sample {
        path: root.clone(),
        action: "commit the sample",
        reason: error.message().to_owned(),
    })?;
    Ok(root)
}

fn commit_sample(root: &Path) -> Result<(), git2::Error> {
    let mut init = git2::RepositoryInitOptions::new();
    init.initial_head("main");
    let repo = git2::Repository::init_opts(root, &init)?;
    let mut index = repo.index()?;
    for (path, _) in FILES {
        index.add_path(Path::new(path))?;
    }
    // Written to disk so `git status` sees a clean tree, which `grove run` requires to apply.
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let signature =
        git2::Signature::new(AUTHOR_NAME, AUTHOR_EMAIL, &git2::Time::new(COMMIT_TIME, 0))?;
    repo.commit(
        Some("HEAD"),
        &signature,
        &signature,
        "shop: a tiny sample for grove demo",
        &tree,
        &[],
    )?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_target_edit_applies_and_removes_every_log_old() {
        for target in TARGETS {
            let edited = target.edited();
            assert!(
                !edited.contains("log_old"),
                "{}: the edits must remove every log_old: {edited}",
                target.path
            );
            assert_eq!(
                edited.matches("log.info(").count(),
                target.original().matches("log_old(").count(),
                "{}: each call is replaced once",
                target.path
            );
        }
    }

    #[test]
    fn only_the_payments_target_has_a_stray_line_and_it_is_found() {
        let strays: Vec<_> = TARGETS
            .iter()
            .map(|t| (t.path, t.stray_line_number()))
            .collect();
        assert_eq!(
            strays,
            vec![
                ("shop/orders.py", None),
                ("shop/payments.py", Some(9)),
                ("shop/shipping.py", None),
            ]
        );
    }

    #[test]
    fn the_samples_config_holds_its_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".grove/config.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, CONFIG_TOML).unwrap();
        let config = crate::settings::config::ProjectConfig::load(dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(
            config.settings.check,
            Some(crate::settings::options::CheckOptions {
                timeout_s: 120,
                ..crate::settings::options::CheckOptions::new(CHECK_COMMAND)
            }),
            "the sample's .grove/config.toml is valid and runs its tests"
        );
    }

    #[tokio::test]
    async fn the_sample_is_one_clean_commit_on_main_and_refuses_a_non_empty_dir() {
        let dir = tempfile::tempdir().unwrap();
        let root = write_sample(&dir.path().join("sample")).await.unwrap();
        let repo = git2::Repository::open(&root).unwrap();
        let head = repo.head().unwrap();
        assert_eq!(head.name().unwrap(), "refs/heads/main");
        let commit = head.peel_to_commit().unwrap();
        assert_eq!(commit.parent_count(), 0, "one root commit");
        let statuses = repo.statuses(None).unwrap();
        assert_eq!(statuses.len(), 0, "the work tree is clean after the commit");
        for (path, content) in FILES {
            assert_eq!(&std::fs::read_to_string(root.join(path)).unwrap(), content);
        }

        let error = write_sample(&root).await.unwrap_err();
        assert!(
            matches!(error, DemoError::DirNotEmpty { .. }),
            "a second sample in the same dir is refused: {error}"
        );
    }
}
