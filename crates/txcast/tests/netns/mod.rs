//! A cluster of hosts on one machine for integration tests: each host a network namespace
//! with one interface on a shared bridge (10.77.0.1, .2, ... /24), loopback up and IP
//! multicast routed to the bridge. Processes run inside a host (`ip netns exec`); faults are
//! the kernel's: nftables rules inside a host drop a share of its packets at random or every
//! packet to and from some peers; processes are killed (SIGKILL), paused (SIGSTOP) and
//! resumed (SIGCONT). Every name carries the test process's id, so parallel runs do not
//! collide, and everything created (processes, namespaces, bridge, nft tables, the scratch
//! directory) is removed on drop, also when the test panics.
//!
//! Needs root, `ip` and `nft`; [`Cluster::new`] returns `None` after printing one line
//! saying why the test is skipped when it cannot build the cluster. `TXCAST_NETNS_STDERR=DIR`
//! keeps every process's stderr in DIR (with `--log` among a member's options, its log).

#![allow(dead_code)]

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Prints a line to the test's real stderr, past the test harness's output capture.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Runs a command to completion; its stderr on failure.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `nft -f -` with `script` inside namespace `ns`.
fn nft(ns: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())
        .map_err(|e| format!("nft: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {ns}: {}\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One host: a namespace and its address on the bridge.
#[derive(Clone, Debug)]
pub struct Host {
    pub ns: String,
    pub addr: Ipv4Addr,
    /// The interface inside the namespace.
    pub dev: String,
}

/// The process ids started in the cluster and not yet reaped, killed on drop.
type Live = Arc<Mutex<Vec<u32>>>;

/// A process started in a host.
pub struct Proc {
    pub host: usize,
    pub args: Vec<String>,
    child: Option<Child>,
    live: Live,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: signalling our own child, not reaped yet (so its pid is not reused).
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    /// kill -9, and reaps it.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
            self.forget(c.id());
        }
    }

    pub fn term(&self) {
        self.signal(libc::SIGTERM);
    }

    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Its state letter from `/proc/PID/stat` (`S` sleeping, `T` stopped, ...).
    pub fn state(&self) -> char {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        stat.rsplit_once(") ")
            .and_then(|(_, r)| r.chars().next())
            .unwrap_or('?')
    }

    /// Reads one line of its stdout (byte by byte, so nothing after it is consumed and lost
    /// to [`Proc::wait_output`]); `None` at end of file.
    pub fn read_line(&mut self) -> Option<String> {
        use std::io::Read;
        let out = self.child.as_mut()?.stdout.as_mut()?;
        let mut line = Vec::new();
        let mut b = [0u8];
        loop {
            match out.read(&mut b) {
                Ok(1) if b[0] == b'\n' => break,
                Ok(1) => line.push(b[0]),
                _ if line.is_empty() => return None,
                _ => break,
            }
        }
        Some(String::from_utf8_lossy(&line).into_owned())
    }

    /// Whether it has exited (reaping it if so).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let c = self.child.as_mut()?;
        let st = c.try_wait().ok().flatten()?;
        let pid = c.id();
        self.forget(pid);
        Some(st)
    }

    /// Waits up to `limit` for it to end and returns what it printed; on timeout it is
    /// killed and the error says so.
    pub fn wait_output(mut self, limit: Duration) -> Result<Output, String> {
        let mut child = self.child.take().ok_or("already reaped")?;
        let pid = child.id();
        let end = Instant::now() + limit;
        while child.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > end {
                let _ = child.kill();
                let out = child.wait_with_output().map_err(|e| e.to_string())?;
                self.forget(pid);
                return Err(format!(
                    "{:?} still running after {limit:?}; killed. stdout:\n{}\nstderr:\n{}",
                    self.args,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        self.forget(pid);
        Ok(out)
    }

    fn forget(&self, pid: u32) {
        self.live.lock().expect("live").retain(|&p| p != pid);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The hosts, their bridge and scratch directory.
pub struct Cluster {
    pub hosts: Vec<Host>,
    pub bridge: String,
    /// `pid-seq`: in the namespaces' and scratch directory's names.
    pub id: String,
    /// The same, short, in interface names.
    tag: String,
    /// Removed on drop: for data directories, cluster files, shared-memory segments.
    pub dir: PathBuf,
    /// Root-side ends of the hosts' veth pairs.
    veths: Vec<String>,
    live: Live,
}

/// The /24 every cluster uses: namespaces keep parallel clusters apart, the root namespace
/// holds no address of it.
pub const SUBNET: [u8; 3] = [10, 77, 0];

impl Cluster {
    /// `n` hosts, or `None` (after one line saying why it is skipped) if this machine cannot
    /// make them. `test` names the test in that line.
    pub fn new(test: &str, n: usize) -> Option<Cluster> {
        assert!((1..=200).contains(&n));
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let skip = |why: String| {
            say(&format!(
                "SKIPPED {test}: {why} (needs root, iproute2 and nftables)"
            ));
            None
        };
        if euid != 0 {
            return skip(format!(
                "not root (euid {euid}), cannot create network namespaces"
            ));
        }
        for tool in ["ip", "nft"] {
            if Command::new(tool)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
            {
                return skip(format!("`{tool}` not found"));
            }
        }
        remove_stale();
        let pid = std::process::id();
        // Clusters of one test process are told apart by a sequence number.
        let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = format!("{pid}-{seq}");
        let dir = std::env::temp_dir().join(format!("txcast-netns-{id}"));
        let mut c = Cluster {
            hosts: Vec::new(),
            bridge: format!("txb{}", tag(pid, seq)),
            tag: tag(pid, seq),
            id,
            dir,
            veths: Vec::new(),
            live: Arc::default(),
        };
        let _ = std::fs::remove_dir_all(&c.dir);
        if let Err(e) = std::fs::create_dir_all(&c.dir) {
            return skip(format!("cannot create {}: {e}", c.dir.display()));
        }
        // The first namespace tells whether this machine has them at all.
        let probe = format!("txcast-{}-h0", c.id);
        if let Err(e) = run("ip", &["netns", "add", &probe]) {
            return skip(format!("cannot create a network namespace: {e}"));
        }
        c.hosts.push(Host {
            ns: probe,
            addr: host_addr(0),
            dev: "eth0".into(),
        });
        if let Err(e) = c.build(n) {
            // Drop removes what was made.
            panic!("building the namespace cluster: {e}");
        }
        Some(c)
    }

    /// The namespace that holds the bridge: a switch of its own, so the host's firewall
    /// (a FORWARD policy that drops, as container hosts set) never sees the bridged traffic.
    fn switch(&self) -> String {
        format!("txcast-{}-sw", self.id)
    }

    fn build(&mut self, n: usize) -> Result<(), String> {
        let br = self.bridge.clone();
        let sw = self.switch();
        run("ip", &["netns", "add", &sw])?;
        let in_switch = |args: &[&str]| {
            let mut a = vec!["-n", sw.as_str()];
            a.extend_from_slice(args);
            run("ip", &a)
        };
        in_switch(&["link", "add", &br, "type", "bridge"])?;
        // Multicast flooded to every port (no querier on this bridge for snooping to learn from).
        in_switch(&["link", "set", &br, "type", "bridge", "mcast_snooping", "0"])?;
        in_switch(&["link", "set", &br, "up"])?;
        for i in 0..n {
            if i > 0 {
                let ns = format!("txcast-{}-h{i}", self.id);
                run("ip", &["netns", "add", &ns])?;
                self.hosts.push(Host {
                    ns,
                    addr: host_addr(i),
                    dev: "eth0".into(),
                });
            }
            let h = self.hosts[i].clone();
            let outer = format!("txv{}h{i}", self.tag);
            run(
                "ip",
                &[
                    "link", "add", &outer, "netns", &sw, "type", "veth", "peer", "name", "eth0",
                    "netns", &h.ns,
                ],
            )?;
            self.veths.push(outer.clone());
            in_switch(&["link", "set", &outer, "master", &br, "up"])?;
            let inside = |args: &[&str]| {
                let mut a = vec!["-n", h.ns.as_str()];
                a.extend_from_slice(args);
                run("ip", &a)
            };
            inside(&["link", "set", "lo", "up"])?;
            inside(&["addr", "add", &format!("{}/24", h.addr), "dev", &h.dev])?;
            inside(&["link", "set", &h.dev, "up"])?;
            inside(&["route", "add", "224.0.0.0/4", "dev", &h.dev])?;
        }
        Ok(())
    }

    /// A cluster file for `txcast` naming site `s` at host `s` (for every host), with its
    /// shared-memory segments in the scratch directory.
    pub fn cluster_toml(&self) -> String {
        let mut t = format!(
            "loopback_default = false\nshm_dir = \"{}\"\n[sites]\n",
            self.dir.join("shm").display()
        );
        for (s, h) in self.hosts.iter().enumerate() {
            t.push_str(&format!("{s} = \"{}\"\n", h.addr));
        }
        t
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Starts `program args` in host `host`, its stdout and stderr piped.
    pub fn spawn(&self, host: usize, program: &Path, args: &[String]) -> Proc {
        // `TXCAST_NETNS_STDERR=DIR` keeps every process's stderr (its `--log` output) in
        // `DIR/<cluster id>-h<host>-<n>.log`, for looking into a run; otherwise it is piped.
        let stderr = match std::env::var_os("TXCAST_NETNS_STDERR") {
            Some(dir) => {
                let n = self.live.lock().expect("live").len();
                let name = format!("{}-h{host}-{n}.log", self.id);
                std::fs::File::create(Path::new(&dir).join(name))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::piped())
            }
            None => Stdio::piped(),
        };
        let child = Command::new("ip")
            .args(["netns", "exec", &self.hosts[host].ns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("ip netns exec {program:?}: {e}"));
        // `ip netns exec` execs the program in place: this pid is the program's.
        self.live.lock().expect("live").push(child.id());
        let mut all = vec![program.display().to_string()];
        all.extend(args.iter().cloned());
        Proc {
            host,
            args: all,
            child: Some(child),
            live: self.live.clone(),
        }
    }

    /// The same program and arguments again in the same host (after `kill9`).
    pub fn restart(&self, p: &Proc) -> Proc {
        self.spawn(p.host, Path::new(&p.args[0]), &p.args[1..])
    }

    /// Drops `per_mille` of the packets host `host` receives and of those it sends, at
    /// random (nftables `numgen random`), until [`Cluster::clear_loss`].
    pub fn loss(&self, host: usize, per_mille: u32) -> Result<(), String> {
        let h = &self.hosts[host];
        let _ = self.clear_loss(host);
        nft(
            &h.ns,
            &format!(
                "table inet txcast_loss {{\n\
                 chain in {{ type filter hook input priority 0; iifname \"{d}\" numgen random mod 1000 < {per_mille} drop; }}\n\
                 chain out {{ type filter hook output priority 0; oifname \"{d}\" numgen random mod 1000 < {per_mille} drop; }}\n\
                 }}\n",
                d = h.dev
            ),
        )
    }

    pub fn clear_loss(&self, host: usize) -> Result<(), String> {
        nft(&self.hosts[host].ns, "delete table inet txcast_loss\n")
    }

    /// Host `host` exchanges nothing with `peers` (every packet to or from them dropped)
    /// until [`Cluster::heal`].
    pub fn partition(&self, host: usize, peers: &[usize]) -> Result<(), String> {
        let h = &self.hosts[host];
        let _ = self.heal(host);
        let set: Vec<String> = peers
            .iter()
            .map(|&p| self.hosts[p].addr.to_string())
            .collect();
        let set = set.join(", ");
        nft(
            &h.ns,
            &format!(
                "table inet txcast_part {{\n\
                 chain in {{ type filter hook input priority -10; ip saddr {{ {set} }} drop; }}\n\
                 chain out {{ type filter hook output priority -10; ip daddr {{ {set} }} drop; }}\n\
                 }}\n"
            ),
        )
    }

    /// Host `host`'s nftables ruleset, as `nft list ruleset` prints it.
    pub fn ruleset(&self, host: usize) -> String {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.hosts[host].ns,
                "nft",
                "list",
                "ruleset",
            ])
            .output()
            .expect("nft list ruleset");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    pub fn heal(&self, host: usize) -> Result<(), String> {
        nft(&self.hosts[host].ns, "delete table inet txcast_part\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Processes first (they hold sockets in the namespaces), then the network.
        for pid in self.live.lock().expect("live").drain(..) {
            // SAFETY: a child of ours not reaped yet; SIGKILL then reap.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGCONT);
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
        }
        for h in &self.hosts {
            let _ = run("ip", &["netns", "del", &h.ns]);
        }
        let _ = run("ip", &["netns", "del", &self.switch()]);
        // Deleting a namespace deletes its veth ends, and so the peers; in case not:
        for v in &self.veths {
            let _ = Command::new("ip")
                .args(["link", "del", v])
                .stderr(Stdio::null())
                .status();
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A short tag of a process id and sequence number for interface names (15 bytes at most):
/// the pid in base 36 (5 digits at most), then the sequence number.
fn tag(pid: u32, seq: u32) -> String {
    let mut digits = Vec::new();
    let mut p = pid;
    loop {
        digits.push(char::from_digit(p % 36, 36).expect("digit"));
        p /= 36;
        if p == 0 {
            break;
        }
    }
    digits.iter().rev().collect::<String>() + &format!("x{seq}")
}

fn host_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], i as u8 + 1)
}

/// Removes namespaces, bridges and scratch directories left by runs whose process is gone
/// (killed before their drop ran).
fn remove_stale() {
    let Ok(list) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&list.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        // txcast-PID-SEQ-hI
        let parts: Vec<&str> = name.split('-').collect();
        let ["txcast", pid, seq, host] = parts[..] else {
            continue;
        };
        let (Ok(pid), Ok(seq)) = (pid.parse::<u32>(), seq.parse::<u32>()) else {
            continue;
        };
        if !(host.starts_with('h') || host == "sw")
            || Path::new("/proc").join(pid.to_string()).exists()
        {
            continue;
        }
        let _ = run("ip", &["netns", "del", name]);
        let _ = Command::new("ip")
            .args(["link", "del", &format!("txb{}", tag(pid, seq))])
            .stderr(Stdio::null())
            .status();
        let _ =
            std::fs::remove_dir_all(std::env::temp_dir().join(format!("txcast-netns-{pid}-{seq}")));
    }
}
