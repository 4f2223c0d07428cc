//! The sandbox's network line, with real servers and a real ssh-agent: a command has a
//! loopback of its own (a test server on 127.0.0.1 works, two commands bind one port at
//! once), and neither the host's loopback services nor its Unix sockets (the user's
//! ssh-agent, a service's socket, an abstract socket) answer it; its own sockets and
//! `socketpair` keep working.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use pretty_assertions::assert_eq;

use grove::tools::ExecOutcome;
use grove::tools::sandbox::SandboxPolicy;

use crate::suite::sandbox::{Scene, run_in};

/// A Python program that serves HTTP on 127.0.0.1:PORT for a second (so that two of them
/// at once hold the port together), fetches its own page, then tries the host's
/// listener on port HOST.
const SERVE: &str = r#"
import http.server, socket, sys, threading, time, urllib.request
port, host_port = int(sys.argv[1]), int(sys.argv[2])
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from " + sys.argv[3].encode())
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", port), Page)
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(1)
print(urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode())
try:
    socket.create_connection(("127.0.0.1", host_port), timeout=5)
    print("host: reached")
except ConnectionRefusedError:
    print("host: refused")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_server_on_127_0_0_1_works_and_two_commands_bind_one_port_at_once() {
    let Some(scene) =
        Scene::confined("a_test_server_on_127_0_0_1_works_and_two_commands_bind_one_port_at_once")
    else {
        return;
    };
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let second = scene.worktree.with_file_name("worktree-2");
    std::fs::create_dir(&second).unwrap();
    for tree in [&scene.worktree, &second] {
        std::fs::write(tree.join("serve.py"), SERVE).unwrap();
    }
    let executor = scene.executor(SandboxPolicy::default());
    let command = |name: &str| format!("python3 serve.py 18765 {host_port} {name} && echo exit=$?");

    let (first, other) = (command("one"), command("two"));
    let (one, two) = tokio::join!(
        run_in(&executor, &scene.worktree, &first),
        run_in(&executor, &second, &other),
    );

    assert_eq!(
        (one.output_text(), two.output_text()),
        (
            "hello from one\nhost: refused\nexit=0\n".to_owned(),
            "hello from two\nhost: refused\nexit=0\n".to_owned()
        ),
        "each command serves and fetches its own page on the same fixed port at the same \
         time, and the host's listener on 127.0.0.1 does not answer either"
    );
    assert_eq!(
        host.accept().map(|_| ()).map_err(|error| error.kind()),
        Err(ErrorKind::WouldBlock),
        "nothing reached the host's loopback service"
    );
}

/// The user's ssh-agent, at `socket`, holding a fresh key; killed when dropped.
struct Agent {
    child: Child,
    public_key: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts an ssh-agent at `socket` and adds a new key to it; `None` (the test skipped)
/// where OpenSSH's client tools are not installed, unless `.ci/run`'s
/// `GROVE_REQUIRE_SANDBOX` says they must be.
fn agent(socket: &Path, keys: &Path) -> Option<Agent> {
    let installed = ["ssh-agent", "ssh-add", "ssh-keygen"]
        .iter()
        .all(|tool| Command::new(tool).arg("-?").output().is_ok());
    if !installed {
        assert!(
            std::env::var_os("GROVE_REQUIRE_SANDBOX").is_none(),
            "GROVE_REQUIRE_SANDBOX is set but OpenSSH's client (ssh-agent) is not installed"
        );
        eprintln!("skipped: ssh-agent is not installed");
        return None;
    }
    let child = Command::new("ssh-agent")
        .args(["-D", "-a"])
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let key = keys.join("id_ed25519");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "grove-test", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success(), "ssh-keygen made a key");
    let added = Command::new("ssh-add")
        .arg(&key)
        .env("SSH_AUTH_SOCK", socket)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(added.success(), "ssh-add gave the agent the key");
    let public_key = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let public_key = public_key.split_whitespace().nth(1).unwrap().to_owned();
    Some(Agent { child, public_key })
}

/// A Python program that tries each Unix socket named on its command line (a path, or
/// `@name` for an abstract one), then serves and reaches one of its own in the tree and
/// a `socketpair`.
const UNIX_CLIENT: &str = r#"
import os, socket, sys
for target in sys.argv[1:]:
    address = "\0" + target[1:] if target.startswith("@") else target
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(address)
        print(target, "reached")
    except OSError as error:
        print(target, "refused:", type(error).__name__)
own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
own.bind("own.sock")
own.listen(1)
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect("own.sock")
server, _ = own.accept()
client.sendall(b"ping")
print("own socket:", server.recv(4).decode())
a, b = socket.socketpair()
a.sendall(b"pair")
print("socketpair:", b.recv(4).decode())
os.remove("own.sock")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_unix_sockets_are_out_of_reach_and_the_commands_own_work() {
    let Some(scene) =
        Scene::confined("host_unix_sockets_are_out_of_reach_and_the_commands_own_work")
    else {
        return;
    };
    // Where ssh-agent puts its socket by default (`/tmp/ssh-XXXX/agent.N`), outside the tree.
    let agent_dir = scene.outside.join("ssh-XXXXabcd");
    std::fs::create_dir(&agent_dir).unwrap();
    let agent_socket = agent_dir.join("agent.4242");
    let Some(agent) = agent(&agent_socket, &scene.outside) else {
        return;
    };
    let service = UnixListener::bind(scene.outside.join("service.sock")).unwrap();
    service.set_nonblocking(true).unwrap();
    let abstract_name = format!("grove-test-{}", std::process::id());
    let abstract_service = {
        use std::os::linux::net::SocketAddrExt as _;
        let address =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        UnixListener::bind_addr(&address).unwrap()
    };
    abstract_service.set_nonblocking(true).unwrap();
    std::fs::write(scene.worktree.join("client.py"), UNIX_CLIENT).unwrap();
    let service_path = scene.outside.join("service.sock");
    let command = format!(
        "SSH_AUTH_SOCK={agent} ssh-add -L; echo ssh-add=$?; \
         python3 client.py {agent} {service} @{abstract_name}; echo env-agent=${{SSH_AUTH_SOCK:-none}}",
        agent = agent_socket.display(),
        service = service_path.display(),
    );
    let mut env = scene.env();
    env.push((
        "SSH_AUTH_SOCK".into(),
        agent_socket.clone().into_os_string(),
    ));
    let executor = grove::tools::sandbox::SandboxedExecutor::new(SandboxPolicy::default(), env);

    let result = run_in(&executor, &scene.worktree, &command).await;
    let output = result.output_text();

    assert_eq!(result.outcome, ExecOutcome::Exited(0), "{output}");
    assert!(
        !output.contains(&agent.public_key),
        "the agent lists no key to the command: {output}"
    );
    let lines: Vec<&str> = output
        .lines()
        .filter(|line| !line.starts_with("Error connecting") && !line.contains("Could not open"))
        .collect();
    assert_eq!(
        lines,
        vec![
            "ssh-add=2".to_owned(),
            format!("{} refused: FileNotFoundError", agent_socket.display()),
            format!("{} refused: FileNotFoundError", service_path.display()),
            format!("@{abstract_name} refused: ConnectionRefusedError"),
            "own socket: ping".to_owned(),
            "socketpair: pair".to_owned(),
            "env-agent=none".to_owned(),
        ],
        "the user's ssh-agent and a service's socket do not exist for the command, an \
         abstract socket is out of reach (and SSH_AUTH_SOCK is not passed); the command's \
         own socket and socketpair work"
    );
    assert_eq!(
        (
            service.accept().map(|_| ()).map_err(|error| error.kind()),
            abstract_service
                .accept()
                .map(|_| ())
                .map_err(|error| error.kind())
        ),
        (Err(ErrorKind::WouldBlock), Err(ErrorKind::WouldBlock)),
        "no connection reached the host's services"
    );
    // The agent still serves the user: only the command's view was covered.
    let listed = Command::new("ssh-add")
        .arg("-L")
        .env("SSH_AUTH_SOCK", &agent_socket)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&agent.public_key),
        "outside the sandbox the agent still lists the key (so the test above can fail)"
    );
}

/// A Python program that tries an internet socket, a Unix socket and a socketpair.
const SOCKETS: &str = r#"
import socket
for name, family in [("inet", socket.AF_INET), ("unix", socket.AF_UNIX)]:
    try:
        socket.socket(family, socket.SOCK_STREAM)
        print(name, "opened")
    except PermissionError:
        print(name, "refused")
a, b = socket.socketpair()
a.sendall(b"pair")
print("socketpair:", b.recv(4).decode())
"#;

#[tokio::test]
async fn without_namespaces_every_socket_but_a_socketpair_is_refused() {
    let Some(scene) =
        Scene::confined("without_namespaces_every_socket_but_a_socketpair_is_refused")
    else {
        return;
    };
    std::fs::write(scene.worktree.join("sockets.py"), SOCKETS).unwrap();
    let no_loopback = scene.executor(SandboxPolicy {
        own_loopback: false,
        ..SandboxPolicy::default()
    });
    let with_namespaces = scene.executor(SandboxPolicy::default());

    let refused = run_in(&no_loopback, &scene.worktree, "python3 sockets.py").await;
    let opened = run_in(&with_namespaces, &scene.worktree, "python3 sockets.py").await;

    assert_eq!(
        (refused.output_text(), opened.output_text()),
        (
            "inet refused\nunix refused\nsocketpair: pair\n".to_owned(),
            "inet opened\nunix opened\nsocketpair: pair\n".to_owned()
        ),
        "--sandbox no-loopback (no namespace to keep the host out) refuses every socket \
         but socketpair; the whole sandbox opens them in namespaces of the command's own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_socket_bound_by_a_relative_path_is_out_of_reach_too() {
    let Some(scene) = Scene::confined("a_host_socket_bound_by_a_relative_path_is_out_of_reach_too")
    else {
        return;
    };
    // A service that binds `service.sock` relative to its working directory, outside the
    // tree: `/proc/net/unix` names it `service.sock` alone.
    let mut service = Command::new("python3")
        .args([
            "-c",
            "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.bind('service.sock')\n\
             s.listen(1)\ns.setblocking(False)\nprint('bound', flush=True)\nsys.stdin.read()\n\
             try:\n    s.accept()\n    print('accepted')\nexcept BlockingIOError:\n    \
             print('no connection')\n",
        ])
        .current_dir(&scene.outside)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(service.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "bound\n", "the service bound its socket");
    std::fs::write(scene.worktree.join("client.py"), UNIX_CLIENT).unwrap();
    let socket = scene.outside.join("service.sock");
    let executor =
        grove::tools::sandbox::SandboxedExecutor::new(SandboxPolicy::default(), scene.env());

    let result = run_in(
        &executor,
        &scene.worktree,
        &format!("python3 client.py {}", socket.display()),
    )
    .await;
    drop(service.stdin.take());
    let mut served = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut served).unwrap();
    service.wait().unwrap();

    assert_eq!(
        (result.outcome, result.output_text(), served),
        (
            ExecOutcome::Exited(0),
            format!(
                "{} refused: FileNotFoundError\nown socket: ping\nsocketpair: pair\n",
                socket.display()
            ),
            "no connection\n".to_owned()
        ),
        "a host socket bound by a relative path is out of reach like any other (the \
         service saw no connection); the command's own relative socket still works"
    );
}
