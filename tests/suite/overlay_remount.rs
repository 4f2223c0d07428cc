//! A copy-on-write tree mounted again over the layers an earlier host left (a resume
//! after grove stopped or was killed): the mount skips the disk's syncs (`volatile`),
//! which leaves a mark the kernel refuses to mount over, so grove empties the scratch
//! directory first; the worker's changes are all still seen, and a machine restart since
//! the last mount is told.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use pretty_assertions::assert_eq;

use grove::worktree::{Layers, TreeHost, overlay};

use super::overlay::overlay_or_skip;

/// The mount options of the overlay at `mount_point` in process `pid`'s namespace.
fn mount_options(pid: u32, mount_point: &Path) -> String {
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let point = mount_point.to_str().unwrap();
    mountinfo
        .lines()
        .find(|line| line.split(' ').nth(4) == Some(point))
        .and_then(|line| line.rsplit(' ').next())
        .unwrap_or_default()
        .to_owned()
}

/// What one mount of the tree showed.
#[derive(Debug, PartialEq, Eq)]
struct Mounted {
    volatile: bool,
    changed: Option<String>,
    readme: String,
}

async fn mount_and_look(layers: &Layers) -> Mounted {
    let host = TreeHost::start(layers.clone())
        .await
        .expect("a tree mounts again over the layers an earlier mount left");
    let seen = host.namespace().grove_root().to_path_buf();
    let mounted = Mounted {
        volatile: mount_options(host.pid().unwrap(), &layers.mount_point).contains("volatile"),
        changed: std::fs::read_to_string(seen.join("changed")).ok(),
        readme: std::fs::read_to_string(seen.join("README")).unwrap(),
    };
    if mounted.changed.is_none() {
        std::fs::write(seen.join("changed"), "changed\n").unwrap();
    }
    host.stop().await;
    mounted
}

#[tokio::test]
async fn a_tree_mounted_again_over_its_layers_sees_its_changes_and_tells_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    if !overlay_or_skip("a_tree_mounted_again_over_its_layers", &root).await {
        return;
    }
    let lower = root.join("base");
    std::fs::create_dir_all(&lower).unwrap();
    std::fs::write(lower.join("README"), "base\n").unwrap();
    let layers = Layers::beside(&lower, &root.join("tree"));
    let mark = layers.own_dir().unwrap().join("boot_id");

    let first = mount_and_look(&layers).await;
    let restart_after_first = layers.mounted_before_restart();
    let second = mount_and_look(&layers).await;
    // As a start of the machine before this one would have left it.
    std::fs::write(&mark, "00000000-0000-0000-0000-000000000000\n").unwrap();
    let restart_faked = layers.mounted_before_restart();
    let third = mount_and_look(&layers).await;
    let restart_after_third = layers.mounted_before_restart();

    let changed = Some("changed\n".to_owned());
    let again = |volatile| Mounted {
        volatile,
        changed: changed.clone(),
        readme: "base\n".to_owned(),
    };
    assert_eq!(
        (
            first,
            restart_after_first,
            second,
            restart_faked,
            third,
            restart_after_third
        ),
        (
            Mounted {
                volatile: true,
                changed: None,
                readme: "base\n".to_owned(),
            },
            false,
            again(true),
            true,
            again(true),
            false,
        ),
        "every mount is volatile and sees what the earlier ones changed; only a mark of \
         an earlier start of the machine counts as a restart, and a mount renews it"
    );

    overlay::remove_own_dirs(&layers).unwrap();
    assert_eq!(
        (
            layers.own_dir().unwrap().exists(),
            std::fs::read_dir(&lower).unwrap().count()
        ),
        (false, 1),
        "the worker's directories go, scratch included, and the base is never written"
    );
}
