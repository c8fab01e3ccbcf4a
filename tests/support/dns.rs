//! A real DNS server for the DNS resolver tests: Debian's `dnsmasq`, started as a child
//! process on a free loopback port (UDP and TCP), answering only from a hosts file that the
//! test rewrites and makes it re-read with SIGHUP; killed on drop.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use tokio::time::Instant;

/// A running `dnsmasq` serving the names of its hosts file.
pub struct Dnsmasq {
    child: Child,
    /// `127.0.0.1:<port>`, UDP and TCP.
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// The `dnsmasq` binary: on PATH, or in /usr/sbin (not on every user's PATH).
fn binary() -> Option<String> {
    ["dnsmasq", "/usr/sbin/dnsmasq"]
        .into_iter()
        .find(|candidate| {
            Command::new(candidate)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_owned)
}

/// Whether this process runs as root (dnsmasq then drops to `nobody` unless told).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("Uid:"))
                .and_then(|line| line.split_whitespace().nth(1).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

impl Dnsmasq {
    /// Starts dnsmasq on a free loopback port with `hosts` (`(ip, name)` pairs) as its only
    /// source of answers, and waits (at most 10 s) until it answers for `hosts`' first name.
    /// A port taken between choosing and binding is retried, at most 5 times.
    ///
    /// # Panics
    ///
    /// When dnsmasq is not installed (run `scripts/install-test-servers.sh`) or does not answer.
    pub async fn start(hosts: &[(&str, &str)]) -> Self {
        let binary = binary().expect(
            "the `dnsmasq` binary is not installed: run scripts/install-test-servers.sh \
             (installs Debian's dnsmasq-base package) before these tests",
        );
        let mut dir = tempfile::tempdir().expect("temp dir");
        let hosts_path = dir.path().join("hosts");
        std::fs::write(&hosts_path, hosts_text(hosts)).expect("write hosts");
        for _ in 0..5 {
            let port = std::net::UdpSocket::bind("127.0.0.1:0")
                .and_then(|s| s.local_addr())
                .expect("free port")
                .port();
            let log = std::fs::File::create(dir.path().join("dnsmasq.log")).expect("log file");
            let mut command = Command::new(&binary);
            command
                .arg("--no-daemon")
                .arg("--keep-in-foreground")
                .arg("--bind-interfaces")
                .arg("--listen-address=127.0.0.1")
                .arg(format!("--port={port}"))
                .arg("--no-resolv")
                .arg("--no-hosts")
                .arg(format!("--addn-hosts={}", hosts_path.display()))
                .arg("--local-ttl=0")
                .arg("--log-queries")
                .arg(format!(
                    "--pid-file={}",
                    dir.path().join("dnsmasq.pid").display()
                ));
            if is_root() {
                // As root dnsmasq drops to `nobody`, who could not read the hosts file in
                // this private directory on SIGHUP; stay the current user.
                command.arg("--user=root").arg("--group=root");
            }
            let child = command
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log file"))
                .stderr(log)
                .spawn()
                .expect("spawn dnsmasq");
            let mut dnsmasq = Self {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                dir,
            };
            let want: Vec<IpAddr> = hosts
                .iter()
                .filter(|(_, name)| *name == hosts[0].1)
                .map(|(ip, _)| ip.parse().expect("ip"))
                .collect();
            if dnsmasq.wait_for(hosts[0].1, &want).await {
                return dnsmasq;
            }
            let _ = dnsmasq.child.kill();
            let _ = dnsmasq.child.wait();
            let log = dnsmasq.log();
            assert!(
                log.contains("Address already in use") || log.contains("failed to create"),
                "dnsmasq did not answer; log:\n{log}"
            );
            dir = dnsmasq.into_dir();
        }
        panic!("no free port for dnsmasq after 5 tries");
    }

    fn into_dir(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.dir, dir)
    }

    fn hosts_path(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    /// What dnsmasq logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dnsmasq.log")).unwrap_or_default()
    }

    /// Replaces the hosts file with `hosts` and sends SIGHUP, then waits (at most 10 s)
    /// until dnsmasq answers `name` with exactly the addresses `hosts` gives it.
    ///
    /// # Panics
    ///
    /// When dnsmasq does not answer so in time.
    pub async fn set_hosts(&mut self, hosts: &[(&str, &str)], name: &str) {
        std::fs::write(self.hosts_path(), hosts_text(hosts)).expect("write hosts");
        let status = Command::new("kill")
            .arg("-HUP")
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIGHUP to dnsmasq");
        let want: Vec<IpAddr> = hosts
            .iter()
            .filter(|(_, n)| *n == name)
            .map(|(ip, _)| ip.parse().expect("ip"))
            .collect();
        assert!(
            self.wait_for(name, &want).await,
            "dnsmasq does not answer {name} with {want:?} after SIGHUP; log:\n{}",
            self.log()
        );
    }

    /// Asks dnsmasq for `name` every 50 ms until it answers exactly `want` (in any order),
    /// for at most 10 s, or until it exits; returns whether it did.
    async fn wait_for(&mut self, name: &str, want: &[IpAddr]) -> bool {
        let mut want = want.to_vec();
        want.sort();
        let resolver = resolver(self.addr);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            resolver.clear_cache();
            if let Ok(Ok(found)) =
                tokio::time::timeout(Duration::from_secs(1), resolver.lookup_ip(name)).await
            {
                let mut found: Vec<IpAddr> = found.iter().collect();
                found.sort();
                if found == want {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

/// A resolver that asks only `server`.
fn resolver(server: SocketAddr) -> TokioResolver {
    let mut udp = ConnectionConfig::udp();
    udp.port = server.port();
    let mut tcp = ConnectionConfig::tcp();
    tcp.port = server.port();
    let mut builder = TokioResolver::builder_with_config(
        ResolverConfig::from_name_servers(vec![NameServerConfig::new(
            server.ip(),
            true,
            vec![udp, tcp],
        )]),
        TokioRuntimeProvider::default(),
    );
    builder.options_mut().use_hosts_file = ResolveHosts::Never;
    builder.options_mut().timeout = Duration::from_millis(500);
    builder.options_mut().attempts = 1;
    builder.build().expect("resolver")
}

fn hosts_text(hosts: &[(&str, &str)]) -> String {
    hosts
        .iter()
        .map(|(ip, name)| format!("{ip} {name}\n"))
        .collect()
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
