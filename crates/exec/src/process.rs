//! Worker processes: spawned in their own process group, stdout/stderr drained on threads into
//! bounded buffers, requests and replies on a private Unix socket, killed as a group
//! (SIGTERM, grace period, SIGKILL) on timeout, cancellation and drop.

use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};

/// Bytes of each stream kept: the head and the tail, each half of this.
pub const LOG_LIMIT: usize = 64 * 1024;
/// Time between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// A shared flag that asks every running evaluation to stop and kill its workers.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A fresh, unset token.
    pub fn new() -> Self {
        Self::default()
    }
    /// Wraps an existing flag (e.g. one a signal handler sets).
    pub fn from_flag(flag: Arc<AtomicBool>) -> Self {
        CancelToken(flag)
    }
    /// Asks for cancellation.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A bounded capture: the first and the last `LOG_LIMIT/2` bytes, with the count dropped.
#[derive(Debug, Default)]
pub struct Bounded {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl Bounded {
    fn push(&mut self, data: &[u8]) {
        let half = LOG_LIMIT / 2;
        for &b in data {
            if self.head.len() < half {
                self.head.push(b);
            } else {
                if self.tail.len() == half {
                    self.tail.pop_front();
                    self.dropped += 1;
                }
                self.tail.push_back(b);
            }
        }
    }
    /// The captured text, with a marker where bytes were dropped.
    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!("\n[... {} bytes dropped ...]\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
    /// Empties the capture.
    pub fn clear(&mut self) {
        self.head.clear();
        self.tail.clear();
        self.dropped = 0;
    }
}

/// The last `n` bytes of a string (on a char boundary).
pub fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut i = s.len() - n;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Output of a short-lived command run with a timeout.
#[derive(Debug)]
pub struct CommandOutput {
    /// Captured stdout (bounded).
    pub stdout: Vec<u8>,
    /// Captured stderr (bounded).
    pub stderr: Vec<u8>,
    /// Human description of how it ended.
    pub status_text: String,
    /// Whether it exited 0.
    pub success: bool,
}

fn drain<R: Read + Send + 'static>(mut r: R, buf: Arc<Mutex<Bounded>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut b) = buf.lock() {
                        b.push(&chunk[..n]);
                    }
                }
            }
        }
    })
}

/// Describes how a process ended, naming the signal if one killed it.
pub fn describe_exit(status: &ExitStatus) -> String {
    if let Some(sig) = status.signal() {
        let name = match sig {
            4 => "SIGILL",
            6 => "SIGABRT",
            7 => "SIGBUS",
            8 => "SIGFPE",
            9 => "SIGKILL",
            11 => "SIGSEGV",
            15 => "SIGTERM",
            _ => "signal",
        };
        format!("killed by {name} ({sig})")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}

/// The environment variable that marks every process a worker starts (inherited by its
/// descendants unless they scrub their environment).
pub const WORKER_TAG_ENV: &str = "KG_WORKER_TAG";
/// The environment variable that tells a worker the number of its descriptor channel: the
/// second socket, on which file descriptors travel (one per one-byte message; `kgcommon.Channel`).
pub const FD_CHANNEL_ENV: &str = "KG_FD_CHANNEL";

/// (pid, ppid) of every process in `/proc`.
fn proc_table() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            out.push((pid, ppid));
        }
    }
    out
}

/// Every process descended from `root` (not `root` itself), by the parent links in `table`.
pub fn descendants_in(root: u32, table: &[(u32, u32)]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in table {
            if pp == p && c != root && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// Processes whose environment carries `WORKER_TAG_ENV=tag` (readable ones only).
fn tagged(tag: &str, table: &[(u32, u32)]) -> Vec<u32> {
    let needle = format!("{WORKER_TAG_ENV}={tag}");
    table
        .iter()
        .filter(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .map(|(pid, _)| *pid)
        .collect()
}

/// Kills every process a worker started, also those that left its process group or session
/// (`setsid`, `start_new_session=True`): its descendants by parent link and every process
/// carrying its tag. Found processes are stopped first (so they cannot fork away while we
/// look), then killed; those re-parented to us (kg-exec makes its process a child subreaper
/// where the OS allows: [`become_child_subreaper`]) are reaped.
///
/// `root` must be a pid we have not reaped yet (so it cannot have been reused).
fn sweep_descendants(root: Option<u32>, tag: Option<&str>) {
    let me = std::process::id();
    let pid = root.unwrap_or(0);
    let mut found: Vec<u32> = Vec::new();
    for _ in 0..5 {
        let table = proc_table();
        let mut now = root.map(|r| descendants_in(r, &table)).unwrap_or_default();
        if let Some(t) = tag {
            now.extend(tagged(t, &table));
        }
        let mut new = false;
        for p in now {
            if p == me || p == pid || found.contains(&p) {
                continue;
            }
            if let Some(q) = i32::try_from(p).ok().and_then(Pid::from_raw) {
                let _ = rustix::process::kill_process(q, Signal::STOP);
            }
            found.push(p);
            new = true;
        }
        if !new {
            break;
        }
    }
    for &p in &found {
        if let Some(q) = i32::try_from(p).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(q, Signal::KILL);
        }
    }
    if !found.is_empty() {
        tracing::debug!(worker = pid, killed = ?found, "killed processes the worker left behind");
    }
    // Reap the ones that became our children; leave everything else to its own parent.
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut left: Vec<u32> = found;
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&p| {
            let Some(q) = i32::try_from(p).ok().and_then(Pid::from_raw) else {
                return false;
            };
            match rustix::process::waitpid(Some(q), rustix::process::WaitOptions::NOHANG) {
                Ok(Some(_)) => false,
                Ok(None) => true,
                Err(_) => false, // not our child (its parent reaps it) or already gone
            }
        });
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Makes this process a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so processes a
/// worker detached are re-parented to us rather than to init when their parent dies, and
/// stay findable. Returns whether it took effect.
pub fn become_child_subreaper() -> bool {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
}

fn kill_group(pid: u32, child: &mut Child, tag: Option<&str>) {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    // Not reaped yet (a zombie at most), so its pid is still its own.
    let alive = matches!(child.try_wait(), Ok(None));
    sweep_descendants(alive.then_some(pid), tag);
    let _ = kill_process_group(p, Signal::TERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Whatever else is in the group (compilers, helpers) goes too, even if the leader exited.
    let _ = kill_process_group(p, Signal::KILL);
    let _ = child.wait();
}

/// Runs a command to completion in its own process group, killing the group after `timeout`.
pub fn output_with_timeout(
    mut cmd: Command,
    timeout: Duration,
) -> Result<CommandOutput, std::io::Error> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let out = Arc::new(Mutex::new(Bounded::default()));
    let err = Arc::new(Mutex::new(Bounded::default()));
    let mut threads = Vec::new();
    if let Some(s) = child.stdout.take() {
        threads.push(drain(s, out.clone()));
    }
    if let Some(s) = child.stderr.take() {
        threads.push(drain(s, err.clone()));
    }
    let deadline = Instant::now() + timeout;
    let status_text;
    let mut success = false;
    loop {
        if let Some(st) = child.try_wait()? {
            success = st.success();
            status_text = describe_exit(&st);
            break;
        }
        if Instant::now() >= deadline {
            kill_group(child.id(), &mut child, None);
            status_text = format!("timed out after {:.0} s", timeout.as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for t in threads {
        let _ = t.join();
    }
    let text =
        |b: &Arc<Mutex<Bounded>>| b.lock().map(|b| b.text().into_bytes()).unwrap_or_default();
    Ok(CommandOutput {
        stdout: text(&out),
        stderr: text(&err),
        status_text,
        success,
    })
}

/// Why a worker request failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The worker did not answer before the deadline; it has been killed.
    #[error("timed out after {seconds:.1} s")]
    Timeout {
        /// Seconds waited.
        seconds: f64,
    },
    /// The worker process ended (crash, signal, exit).
    #[error("worker {how}")]
    Died {
        /// How it ended, e.g. `killed by SIGSEGV (11)`.
        how: String,
    },
    /// Cancellation was asked for; the worker has been killed.
    #[error("cancelled")]
    Cancelled,
    /// The worker could not be started or the socket failed.
    #[error("failed to {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The worker answered with something that is not a JSON object.
    #[error("malformed reply from worker: {0}")]
    Protocol(String),
}

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Interpreter.
    pub python: PathBuf,
    /// Script to run (`-I -B SCRIPT SOCKET PARENT_PID`).
    pub script: PathBuf,
    /// Working directory.
    pub cwd: PathBuf,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Pass on only the variables `crate::integrity::worker_env_allowed` accepts (untrusted
    /// candidates); otherwise the whole environment is inherited (the trusted judge).
    pub allow_listed_env: bool,
    /// Directory for the socket (private, short path).
    pub socket_dir: PathBuf,
    /// A short label used in names and logs (`judge`, `candidate`).
    pub label: String,
    /// OS confinement (the untrusted candidate); `None` for the trusted judge.
    pub sandbox: Option<crate::sandbox::Sandbox>,
}

/// The aside handler of a request that expects none: every aside gets an error reply.
pub fn no_asides(_: &Value) -> Value {
    json!({"error": "this request takes no asides"})
}

/// A running worker process with its socket and captured output.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    pid: u32,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    stdout: Arc<Mutex<Bounded>>,
    stderr: Arc<Mutex<Bounded>>,
    drains: Vec<JoinHandle<()>>,
    socket_path: PathBuf,
    dead: Option<String>,
    tag: String,
    /// Our end of the descriptor channel.
    fds: UnixStream,
    /// When the process was started.
    pub started: Instant,
    /// The confinement observed on the running process (`sandbox::Observed::summary`).
    pub isolation: Option<String>,
}

impl Worker {
    /// Starts the worker and waits (up to `connect_timeout`) for it to connect.
    pub fn spawn(
        spec: &WorkerSpec,
        connect_timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Worker, WorkerError> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let socket_path = spec
            .socket_dir
            .join(format!("{}{n}.sock", &spec.label[..1]));
        let _ = std::fs::remove_file(&socket_path);
        let tag = format!("{}-{n}", std::process::id());
        let listener = UnixListener::bind(&socket_path).map_err(|source| WorkerError::Io {
            what: format!("bind socket `{}`", socket_path.display()),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| WorkerError::Io {
                what: "configure the socket".into(),
                source,
            })?;
        let mut cmd = Command::new(&spec.python);
        if spec.allow_listed_env {
            cmd.env_clear();
            for (k, v) in std::env::vars_os() {
                if k.to_str().is_some_and(crate::integrity::worker_env_allowed) {
                    cmd.env(k, v);
                }
            }
        }
        cmd.arg("-I")
            .arg("-B")
            .arg(&spec.script)
            .arg(&socket_path)
            .arg(std::process::id().to_string())
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("PYTHONUNBUFFERED", "1")
            .env(WORKER_TAG_ENV, &tag)
            .process_group(0);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        if let Some(sb) = &spec.sandbox {
            sb.apply(&mut cmd);
        }
        let (fds, theirs) = UnixStream::pair().map_err(|source| WorkerError::Io {
            what: "make the descriptor channel".into(),
            source,
        })?;
        cmd.env(FD_CHANNEL_ENV, theirs.as_raw_fd().to_string());
        crate::sandbox::inherit_fd(&mut cmd, theirs.as_raw_fd());
        let spawned = cmd.spawn();
        drop(theirs);
        let mut child = spawned.map_err(|source| WorkerError::Io {
            what: format!("start `{}`", spec.python.display()),
            source,
        })?;
        let pid = child.id();
        let stdout = Arc::new(Mutex::new(Bounded::default()));
        let stderr = Arc::new(Mutex::new(Bounded::default()));
        let mut drains = Vec::new();
        if let Some(s) = child.stdout.take() {
            drains.push(drain(s, stdout.clone()));
        }
        if let Some(s) = child.stderr.take() {
            drains.push(drain(s, stderr.clone()));
        }
        let started = Instant::now();
        let deadline = started + connect_timeout;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break Ok(s),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(source) => {
                    break Err(WorkerError::Io {
                        what: "accept the worker's connection".into(),
                        source,
                    });
                }
            }
            if cancel.is_cancelled() {
                break Err(WorkerError::Cancelled);
            }
            if let Ok(Some(st)) = child.try_wait() {
                break Err(WorkerError::Died {
                    how: describe_exit(&st),
                });
            }
            if Instant::now() >= deadline {
                break Err(WorkerError::Timeout {
                    seconds: connect_timeout.as_secs_f64(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = std::fs::remove_file(&socket_path);
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                kill_group(pid, &mut child, Some(&tag));
                for t in drains {
                    let _ = t.join();
                }
                return Err(e);
            }
        };
        let configure = |stream: UnixStream| -> std::io::Result<(UnixStream, UnixStream)> {
            stream.set_nonblocking(false)?;
            stream.set_read_timeout(Some(Duration::from_millis(100)))?;
            let writer = stream.try_clone()?;
            Ok((stream, writer))
        };
        let (reader, writer) = match configure(stream) {
            Ok(p) => p,
            Err(source) => {
                kill_group(pid, &mut child, Some(&tag));
                return Err(WorkerError::Io {
                    what: "configure the worker socket".into(),
                    source,
                });
            }
        };
        // Observed once connected: by then the interpreter runs under whatever took effect.
        let isolation = spec.sandbox.as_ref().map(|sb| {
            crate::sandbox::observe(pid, &sb.read_only).map_or_else(
                || "isolation: could not be observed (/proc unreadable)".to_string(),
                |o| o.summary(),
            )
        });
        Ok(Worker {
            child,
            pid,
            reader: BufReader::new(reader),
            writer,
            stdout,
            stderr,
            drains,
            socket_path,
            dead: None,
            tag,
            fds,
            started,
            isolation,
        })
    }

    /// The process id (also the process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The tag that names this worker's processes (unique per spawn in this process).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Receives the newest file descriptor the worker sent on its descriptor channel, waiting
    /// until `deadline` for the first (one per one-byte message; further descriptors in a
    /// message are closed). Descriptors sent earlier and never asked for (a workload that ended
    /// between the worker's send and our relay) are closed, so an older one is never taken
    /// for the newest.
    pub fn recv_fd(&mut self, deadline: Instant) -> Result<OwnedFd, WorkerError> {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.fds
            .set_read_timeout(Some(wait))
            .map_err(|e| WorkerError::Io {
                what: "set a timeout on the descriptor channel".into(),
                source: e,
            })?;
        let mut newest = self.recv_one_fd(RecvFlags::empty())?;
        // Bounded: the worker could keep sending.
        for _ in 0..64 {
            match self.recv_one_fd(RecvFlags::DONTWAIT) {
                Ok(fd) => newest = fd,
                Err(_) => break,
            }
        }
        Ok(newest)
    }

    fn recv_one_fd(&mut self, flags: RecvFlags) -> Result<OwnedFd, WorkerError> {
        let io = |source: std::io::Error| WorkerError::Io {
            what: "receive a descriptor on the descriptor channel".into(),
            source,
        };
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = recvmsg(
            &self.fds,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            flags | RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| io(e.into()))?;
        if got.bytes == 0 {
            return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let mut first = None;
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                for fd in fds {
                    // Any descriptor after the first is dropped (closed) here.
                    first.get_or_insert(fd);
                }
            }
        }
        first.ok_or_else(|| io(std::io::Error::other("a message came without one")))
    }

    /// Sends `fd` to the worker on its descriptor channel (one one-byte message).
    pub fn send_fd(&mut self, fd: BorrowedFd<'_>) -> Result<(), WorkerError> {
        let fds = [fd];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        sendmsg(
            &self.fds,
            &[IoSlice::new(b"F")],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .map_err(|e| WorkerError::Io {
            what: "send a descriptor on the descriptor channel".into(),
            source: e.into(),
        })?;
        Ok(())
    }

    /// Sends one request and waits for its reply until `deadline`.
    ///
    /// On timeout or cancellation the worker is killed (group SIGTERM, grace, SIGKILL); on a
    /// crash the exit is described. Either way the worker is unusable afterwards.
    pub fn request(
        &mut self,
        msg: &Value,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Value, WorkerError> {
        self.request_with(msg, deadline, cancel, &mut no_asides)
    }

    /// [`Worker::request`], answering each `aside` line the worker sends before its reply
    /// (`{"aside": true, ...}`, e.g. the key of the next timed input set) with `on_aside`.
    pub fn request_with(
        &mut self,
        msg: &Value,
        deadline: Instant,
        cancel: &CancelToken,
        on_aside: &mut dyn FnMut(&Value) -> Value,
    ) -> Result<Value, WorkerError> {
        if let Some(how) = &self.dead {
            return Err(WorkerError::Died { how: how.clone() });
        }
        self.send_line(msg)?;
        let started = Instant::now();
        let mut buf = Vec::new();
        loop {
            let v = self.read_line(&mut buf, started, deadline, cancel)?;
            if v.get("aside").and_then(Value::as_bool) != Some(true) {
                return Ok(v);
            }
            self.send_line(&on_aside(&v))?;
            buf.clear();
        }
    }

    /// Writes one JSON line to the worker.
    fn send_line(&mut self, msg: &Value) -> Result<(), WorkerError> {
        let mut line =
            serde_json::to_string(msg).map_err(|e| WorkerError::Protocol(e.to_string()))?;
        line.push('\n');
        if let Err(source) = self.writer.write_all(line.as_bytes()) {
            return Err(self.classify_failure(source));
        }
        Ok(())
    }

    /// Reads one JSON-object line into `buf` (which it leaves holding the line).
    fn read_line(
        &mut self,
        buf: &mut Vec<u8>,
        started: Instant,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Value, WorkerError> {
        loop {
            match self.reader.read_until(b'\n', buf) {
                Ok(0) => {
                    return Err(self.wait_died());
                }
                Ok(_) if buf.ends_with(b"\n") => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => return Err(self.classify_failure(source)),
            }
            if cancel.is_cancelled() {
                self.kill();
                return Err(WorkerError::Cancelled);
            }
            if Instant::now() >= deadline {
                self.kill();
                self.dead = Some("killed after a timeout".into());
                return Err(WorkerError::Timeout {
                    seconds: started.elapsed().as_secs_f64(),
                });
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                // Give the socket a moment: a reply may have been written just before exit.
                if self.reader.buffer().is_empty() {
                    let how = describe_exit(&st);
                    self.finish_drains();
                    self.dead = Some(how.clone());
                    return Err(WorkerError::Died { how });
                }
            }
        }
        let v: Value = serde_json::from_slice(buf).map_err(|e| {
            WorkerError::Protocol(format!(
                "{e}: `{}`",
                tail(&String::from_utf8_lossy(buf), 500)
            ))
        })?;
        if !v.is_object() {
            return Err(WorkerError::Protocol("reply is not a JSON object".into()));
        }
        Ok(v)
    }

    fn classify_failure(&mut self, source: std::io::Error) -> WorkerError {
        if matches!(
            source.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ) {
            return self.wait_died();
        }
        WorkerError::Io {
            what: "talk to the worker".into(),
            source,
        }
    }

    fn wait_died(&mut self) -> WorkerError {
        // The socket closed: the process is ending. Wait briefly for its status.
        let deadline = Instant::now() + GRACE;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                let how = describe_exit(&st);
                self.finish_drains();
                self.dead = Some(how.clone());
                return WorkerError::Died { how };
            }
            if Instant::now() >= deadline {
                self.kill();
                let how = "closed its socket and was killed".to_string();
                self.dead = Some(how.clone());
                return WorkerError::Died { how };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish_drains(&mut self) {
        // The pipes close when the whole group has exited; kill stragglers first.
        if let Some(p) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) {
            let _ = kill_process_group(p, Signal::KILL);
        }
        for t in self.drains.drain(..) {
            let _ = t.join();
        }
    }

    /// Takes what the worker printed since the last call (stdout then stderr).
    pub fn take_log(&self) -> String {
        let mut s = String::new();
        for (name, b) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if let Ok(mut b) = b.lock() {
                let t = b.text();
                if !t.trim().is_empty() {
                    s.push_str(&format!("--- {name} ---\n{t}"));
                    if !t.ends_with('\n') {
                        s.push('\n');
                    }
                }
                b.clear();
            }
        }
        s
    }

    /// Whether the process has been observed to end.
    pub fn is_dead(&self) -> bool {
        self.dead.is_some()
    }

    /// Kills the whole process group (SIGTERM, grace period, SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if self.dead.is_none() {
            self.dead = Some("killed".into());
        }
        kill_group(self.pid, &mut self.child, Some(&self.tag));
        self.finish_drains();
    }

    /// Asks the worker to exit, then makes sure the group is gone.
    pub fn shutdown(mut self) {
        if self.dead.is_none() {
            let deadline = Instant::now() + Duration::from_secs(5);
            let _ = self.request(
                &serde_json::json!({"op": "shutdown"}),
                deadline,
                &CancelToken::new(),
            );
        }
        self.kill();
    }

    /// The path of the socket the worker connected to (removed once connected).
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            kill_group(self.pid, &mut self.child, Some(&self.tag));
        } else {
            if let Some(p) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) {
                let _ = kill_process_group(p, Signal::KILL);
            }
            sweep_descendants(None, Some(&self.tag));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_head_and_tail() {
        let mut b = Bounded::default();
        let data = vec![b'a'; LOG_LIMIT];
        b.push(&data);
        b.push(&vec![b'z'; 1000]);
        let t = b.text();
        assert!(t.starts_with("aaa"));
        assert!(t.ends_with(&"z".repeat(1000)));
        assert!(t.contains("1000 bytes dropped"), "{}", &t[..100]);
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 60 & echo $! > {}; wait", pidfile.display()));
        let out = output_with_timeout(cmd, Duration::from_millis(500)).unwrap();
        assert!(out.status_text.contains("timed out"), "{}", out.status_text);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was in the same group, so it is gone (or a zombie reaped by init).
        std::thread::sleep(Duration::from_millis(200));
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false);
        assert!(!alive, "grandchild {pid} survived the group kill");
    }

    #[test]
    fn descendants_follow_parent_links_only() {
        let table = [(10, 1), (11, 10), (12, 11), (13, 1), (14, 12), (15, 13)];
        let mut d = descendants_in(10, &table);
        d.sort_unstable();
        assert_eq!(d, vec![11, 12, 14]);
        assert!(descendants_in(14, &table).is_empty());
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    /// A worker over the real `kgcommon` channel that sends a descriptor of a file it opens
    /// (`send`) or reads from the descriptor it receives (`recv`).
    fn fd_worker(dir: &Path, sandbox: Option<crate::sandbox::Sandbox>, label: &str) -> Worker {
        crate::scripts::install(dir).unwrap();
        let py = crate::scripts::dir(dir);
        let script = dir.join(format!("{label}.py"));
        std::fs::write(
            &script,
            format!(
                "import os, sys\nsys.path.insert(0, {py:?})\nimport kgcommon as kg\n\
                 def send(req):\n    fd = os.open(req['path'], os.O_RDONLY)\n    \
                 kg.CHANNEL[0].send_fd(fd)\n    os.close(fd)\n    return {{'result': 'ok'}}\n\
                 def recv(req):\n    fd = kg.CHANNEL[0].recv_fd(5.0)\n    \
                 return {{'result': 'ok', 'data': os.read(fd, 64).decode()}}\n\
                 kg.serve({{'send': send, 'recv': recv}})\n",
                py = py.display().to_string()
            ),
        )
        .unwrap();
        let spec = WorkerSpec {
            python: PathBuf::from(std::env::var("PYTHON_BIN").unwrap_or_else(|_| "python3".into())),
            script,
            cwd: dir.to_path_buf(),
            env: Vec::new(),
            allow_listed_env: false,
            socket_dir: dir.to_path_buf(),
            label: label.into(),
            sandbox,
        };
        Worker::spawn(&spec, Duration::from_secs(30), &CancelToken::new()).unwrap()
    }

    #[test]
    fn descriptors_travel_from_a_sandboxed_worker_through_the_parent_to_another() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("payload");
        std::fs::write(&file, "what the pool holds").unwrap();
        let sb = crate::sandbox::Sandbox::candidate(vec![dir.path().to_path_buf()], 60);
        let mut from = fd_worker(dir.path(), Some(sb), "candidate");
        let mut to = fd_worker(dir.path(), None, "judge");
        let deadline = Instant::now() + Duration::from_secs(20);
        let cancel = CancelToken::new();
        // An older descriptor never relayed is passed over for the newest.
        let stale = dir.path().join("stale");
        std::fs::write(&stale, "an older pool").unwrap();
        for path in [&stale, &file] {
            let r = from
                .request(&json!({"op": "send", "path": path}), deadline, &cancel)
                .unwrap();
            assert_eq!(r["result"], "ok", "{r}");
        }
        let fd = from.recv_fd(deadline).unwrap();
        to.send_fd(std::os::fd::AsFd::as_fd(&fd)).unwrap();
        let r = to
            .request(&json!({"op": "recv"}), deadline, &cancel)
            .unwrap();
        assert_eq!(r["data"], "what the pool holds", "{r}");
        // Nothing more was sent: waiting for another descriptor ends at its deadline.
        let t = Instant::now();
        let e = from
            .recv_fd(Instant::now() + Duration::from_millis(200))
            .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5), "{e}");
        assert!(e.to_string().contains("descriptor channel"), "{e}");
    }

    #[test]
    fn kill_reaches_a_child_in_a_new_session_and_a_tagged_one() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("detached.pid");
        let tagged_pidfile = dir.path().join("tagged.pid");
        let tag = format!("test-{}", std::process::id());
        // Child 1: a new session (setsid), out of the group. Child 2: double-forked (its
        // parent exits at once, so it is no descendant any more) but it carries the tag.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "setsid sleep 60 & echo $! > {}; (setsid sleep 61 & echo $! > {}) ; sleep 60",
                pidfile.display(),
                tagged_pidfile.display()
            ))
            .env(WORKER_TAG_ENV, &tag)
            .process_group(0);
        let mut child = cmd.spawn().unwrap();
        let read = |p: &Path| -> i32 {
            for _ in 0..100 {
                if let Ok(s) = std::fs::read_to_string(p)
                    && let Ok(v) = s.trim().parse()
                {
                    return v;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            panic!("no pid in {}", p.display())
        };
        let (a, b) = (read(&pidfile), read(&tagged_pidfile));
        assert!(alive(a) && alive(b));
        kill_group(child.id(), &mut child, Some(&tag));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!alive(a), "detached child {a} survived");
        assert!(!alive(b), "tagged orphan {b} survived");
    }
}
