//! Worker processes: spawned in their own process group, stdout/stderr drained on threads into
//! bounded buffers, requests and replies on an inherited socketpair (no filesystem path another
//! process could bind or connect to), read against the deadline within the bounds of
//! [`crate::protocol::Bounds`], killed as a group (SIGTERM, grace period, SIGKILL) on timeout,
//! cancellation, a protocol error and drop.

use std::io::{IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use serde_json::Value;

use crate::protocol::{Aside, AsideReply, Bounds, Envelope, LineBuffer, ProtocolError, Reply};

pub use kg_proc::{
    Bounded, CancelToken, CommandOutput, GRACE, LOG_LIMIT, become_child_subreaper, describe_exit,
    output_with_timeout, tail,
};
use kg_proc::{drain, end_child_group, sweep_descendants};

/// The environment variable that marks every process a worker starts (inherited by its
/// descendants unless they scrub their environment).
pub const WORKER_TAG_ENV: &str = "KG_WORKER_TAG";
/// The environment variable that tells a worker the number of its descriptor channel: the
/// second socket, on which file descriptors travel (one per one-byte message; `kg_wire.Channel`).
pub const FD_CHANNEL_ENV: &str = "KG_FD_CHANNEL";

/// The environment entry (`NAME=value`) that marks every process of the worker tagged `tag`.
fn tag_entry(tag: &str) -> String {
    format!("{WORKER_TAG_ENV}={tag}")
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
    /// The worker broke the protocol (a malformed or oversized message); it has been killed.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// The worker never sent its ready line (it timed out, died or broke the protocol first);
    /// it has been killed. `log` is what it printed.
    #[error("{}", start_failure(why, log))]
    NotStarted {
        /// Why it did not start.
        why: Box<WorkerError>,
        /// Its stdout/stderr (bounded, head and tail).
        log: String,
    },
}

/// [`WorkerError::NotStarted`]'s text: the reason, then the end of what the worker printed.
fn start_failure(why: &WorkerError, log: &str) -> String {
    if log.trim().is_empty() {
        format!("the worker did not start: {why} (it printed nothing)")
    } else {
        format!("the worker did not start: {why}\n{}", tail(log, 4000))
    }
}

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Interpreter.
    pub python: PathBuf,
    /// Script to run (`-I -B SCRIPT CHANNEL_FD PARENT_PID`: the protocol channel is inherited
    /// under descriptor number `CHANNEL_FD`; `kg_wire.serve`).
    pub script: PathBuf,
    /// Working directory.
    pub cwd: PathBuf,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Pass on only the variables `crate::integrity::worker_env_allowed` accepts (untrusted
    /// candidates); otherwise the whole environment is inherited (the trusted judge).
    pub allow_listed_env: bool,
    /// How much the worker may send per message and per request.
    pub bounds: Bounds,
    /// A short label used in names and logs (`judge`, `candidate`).
    pub label: String,
    /// OS confinement (the untrusted candidate); `None` for the trusted judge.
    pub sandbox: Option<crate::sandbox::Sandbox>,
    /// Start without the site module (`-S`), with this import path handed over in
    /// [`SYS_PATH_ENV`] (`crate::python::InterpreterPaths`): no start-up code of the
    /// interpreter's site directories runs in the worker. `None`: the site module runs.
    pub sys_path: Option<Vec<String>>,
}

/// The environment variable carrying a `-S` worker's import path (JSON list; `kg_wire`).
pub const SYS_PATH_ENV: &str = "KG_SYS_PATH";

/// The aside handler of a request that expects none: every aside gets an error reply.
pub fn no_asides(_: &Aside) -> AsideReply {
    AsideReply::Refused("this request takes no asides".into())
}

/// How often a blocked read or write on the protocol channel wakes up to check the deadline,
/// the cancel flag and the process.
const READ_TICK: Duration = Duration::from_millis(100);

/// A channel read or write that only ran out of its tick (or was interrupted): check the
/// deadline and the process, then try again.
fn wait_and_retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// A running worker process with its protocol channel and captured output.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    pid: u32,
    /// Our end of the protocol channel (reads and writes time out every [`READ_TICK`]).
    chan: UnixStream,
    /// Unread bytes from `chan`.
    lines: LineBuffer,
    bounds: Bounds,
    /// Bytes received since the current request was sent.
    received: usize,
    stdout: Arc<Mutex<Bounded>>,
    stderr: Arc<Mutex<Bounded>>,
    drains: Vec<JoinHandle<()>>,
    dead: Option<String>,
    tag: String,
    /// Our end of the descriptor channel.
    fds: UnixStream,
    /// When the process was started.
    pub started: Instant,
    /// The confinement observed on the running process (`None`: not sandboxed).
    pub isolation: Option<kg_contract::IsolationReport>,
    /// The uid/gid it runs as where the sandbox changed it (its files are handed to it).
    pub sandbox_uid: Option<(u32, u32)>,
    /// Its cgroup, removed after the process group is gone (fields drop after `Drop::drop`).
    cgroup: Option<crate::sandbox::cgroup::Cgroup>,
}

/// A worker process started by [`Worker::launch`] that has not yet been waited for: it starts
/// its interpreter (and imports what its script imports before saying it is ready) while the
/// caller does other work. Dropping it kills its process group.
#[derive(Debug)]
pub struct Launching {
    worker: Worker,
    sandbox: Option<crate::sandbox::Sandbox>,
}

impl Launching {
    /// When the process was started.
    pub fn started(&self) -> Instant {
        self.worker.started
    }

    /// Waits (up to `connect_timeout` from now) for the worker's ready line, then observes its
    /// confinement.
    pub fn ready(
        self,
        connect_timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Worker, WorkerError> {
        let Launching {
            mut worker,
            sandbox,
        } = self;
        let w = &mut worker;
        let now = Instant::now();
        // The worker's first message says it serves requests (what connecting to the socket
        // said before): a worker that never gets there times out or dies here, with its log.
        let why = match w.read_message(now, now + connect_timeout, cancel) {
            Ok(Envelope::Ready) => None,
            Ok(other) => Some(WorkerError::Protocol(ProtocolError::Unexpected {
                got: other.kind(),
                expected: "its ready line",
            })),
            Err(WorkerError::Timeout { .. }) => Some(WorkerError::Timeout {
                seconds: connect_timeout.as_secs_f64(),
            }),
            Err(e) => Some(e),
        };
        if let Some(why) = why {
            w.kill();
            if matches!(why, WorkerError::Cancelled) {
                return Err(why);
            }
            let log = w.take_log();
            return Err(WorkerError::NotStarted {
                why: Box::new(why),
                log,
            });
        }
        // Observed once it is ready: by then the interpreter runs under whatever took effect.
        w.isolation = sandbox.as_ref().map(|sb| {
            crate::sandbox::observe(w.pid, &sb.expected(w.cgroup.as_ref())).unwrap_or_else(|| {
                kg_contract::IsolationReport::unobserved("could not be observed (/proc unreadable)")
            })
        });
        Ok(worker)
    }
}

impl Worker {
    /// Starts the worker and waits (up to `connect_timeout`) for it to connect.
    pub fn spawn(
        spec: &WorkerSpec,
        connect_timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Worker, WorkerError> {
        Worker::launch(spec)?.ready(connect_timeout, cancel)
    }

    /// Starts the worker without waiting for it ([`Launching::ready`] does).
    pub fn launch(spec: &WorkerSpec) -> Result<Launching, WorkerError> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}-{n}", std::process::id());
        let mut cmd = Command::new(&spec.python);
        if spec.allow_listed_env {
            cmd.env_clear();
            for (k, v) in std::env::vars_os() {
                if k.to_str().is_some_and(crate::integrity::worker_env_allowed) {
                    cmd.env(k, v);
                }
            }
        }
        // The protocol channel: one end of a socketpair, inherited by number (no path in any
        // directory that another process could bind first or connect to). Our end, like every
        // descriptor Rust opens, is close-on-exec, so no other worker inherits it.
        let (chan, theirs_chan) = UnixStream::pair().map_err(|source| WorkerError::Io {
            what: "make the protocol channel".into(),
            source,
        })?;
        cmd.arg("-I").arg("-B");
        if let Some(paths) = &spec.sys_path {
            // A list of strings always serialises.
            let list = serde_json::to_string(paths).unwrap_or_else(|_| "[]".into());
            cmd.arg("-S").env(SYS_PATH_ENV, list);
        }
        cmd.arg(&spec.script)
            .arg(theirs_chan.as_raw_fd().to_string())
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
        let cgroup = spec.sandbox.as_ref().and_then(|sb| sb.apply(&mut cmd));
        let (fds, theirs) = UnixStream::pair().map_err(|source| WorkerError::Io {
            what: "make the descriptor channel".into(),
            source,
        })?;
        cmd.env(FD_CHANNEL_ENV, theirs.as_raw_fd().to_string());
        crate::sandbox::inherit_fd(&mut cmd, theirs.as_raw_fd());
        crate::sandbox::inherit_fd(&mut cmd, theirs_chan.as_raw_fd());
        let spawned = cmd.spawn();
        // Only the child keeps the other ends: when it dies, reads on ours see end of stream.
        drop(theirs);
        drop(theirs_chan);
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
        if let Err(source) = chan
            .set_read_timeout(Some(READ_TICK))
            .and_then(|()| chan.set_write_timeout(Some(READ_TICK)))
        {
            end_child_group(&mut child, Some(&tag_entry(&tag)));
            return Err(WorkerError::Io {
                what: "configure the protocol channel".into(),
                source,
            });
        }
        let started = Instant::now();
        let worker = Worker {
            child,
            pid,
            chan,
            lines: LineBuffer::default(),
            bounds: spec.bounds,
            received: 0,
            stdout,
            stderr,
            drains,
            dead: None,
            tag,
            fds,
            started,
            isolation: None,
            sandbox_uid: spec
                .sandbox
                .as_ref()
                .and_then(crate::sandbox::Sandbox::drops_to),
            cgroup,
        };
        Ok(Launching {
            worker,
            sandbox: spec.sandbox.clone(),
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
    ///
    /// The reply's envelope is checked ([`crate::protocol::parse`]); the value returned is the
    /// whole reply object, `ok` or `error`. A message over [`Bounds::message`] bytes, more than
    /// [`Bounds::request`] bytes in all, or a malformed one is [`WorkerError::Protocol`], and
    /// the worker is killed at once.
    pub fn request_with(
        &mut self,
        msg: &Value,
        deadline: Instant,
        cancel: &CancelToken,
        on_aside: &mut dyn FnMut(&Aside) -> AsideReply,
    ) -> Result<Value, WorkerError> {
        if let Some(how) = &self.dead {
            return Err(WorkerError::Died { how: how.clone() });
        }
        let started = Instant::now();
        self.send_line(msg, started, deadline, cancel)?;
        self.received = 0;
        loop {
            match self.read_message(started, deadline, cancel)? {
                Envelope::Reply(r) => return Ok(Reply::into_value(r)),
                Envelope::Aside(a) => {
                    let answer = on_aside(&a).to_json();
                    self.send_line(&answer, started, deadline, cancel)?;
                }
                Envelope::Ready => {
                    return Err(self.protocol_failure(ProtocolError::Unexpected {
                        got: "a second ready line",
                        expected: "a reply",
                    }));
                }
            }
        }
    }

    /// Writes one JSON line to the worker, until `deadline`: a worker that stops reading (e.g.
    /// sends asides and never reads their answers) fills the socket, and writes then time out
    /// every [`READ_TICK`] instead of blocking us for ever.
    fn send_line(
        &mut self,
        msg: &Value,
        started: Instant,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<(), WorkerError> {
        let mut line = msg.to_string();
        line.push('\n');
        let bytes = line.as_bytes();
        let mut sent = 0;
        while sent < bytes.len() {
            match (&self.chan).write(&bytes[sent..]) {
                Ok(0) => return Err(self.wait_died()),
                Ok(n) => sent += n,
                Err(e) if wait_and_retry(&e) => {}
                Err(source) => return Err(self.classify_failure(source)),
            }
            if sent < bytes.len() {
                self.check_waiting(started, deadline, cancel)?;
            }
        }
        Ok(())
    }

    /// Between two waits on the channel: ends the request if it was cancelled or its deadline
    /// passed (the worker is killed either way).
    fn check_waiting(
        &mut self,
        started: Instant,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<(), WorkerError> {
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
        Ok(())
    }

    /// Kills the worker for breaking the protocol and says why.
    fn protocol_failure(&mut self, e: ProtocolError) -> WorkerError {
        self.kill();
        self.dead = Some(format!("killed for a protocol error: {e}"));
        WorkerError::Protocol(e)
    }

    /// Reads the next message, waiting until `deadline` (checked after every read, so a worker
    /// that keeps writing cannot hold us past it) and within the worker's [`Bounds`].
    fn read_message(
        &mut self,
        started: Instant,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Envelope, WorkerError> {
        loop {
            match self.lines.take_line(self.bounds.message) {
                Ok(Some(line)) => {
                    return crate::protocol::parse(&line).map_err(|e| self.protocol_failure(e));
                }
                Ok(None) => {}
                Err(e) => return Err(self.protocol_failure(e)),
            }
            match self.lines.fill(&mut &self.chan, self.bounds.message) {
                Ok(0) => return Err(self.wait_died()),
                Ok(n) => {
                    self.received = self.received.saturating_add(n);
                    if self.received > self.bounds.request {
                        let limit = self.bounds.request;
                        return Err(self.protocol_failure(ProtocolError::RequestTooLarge { limit }));
                    }
                }
                Err(e) if wait_and_retry(&e) => {}
                Err(source) => return Err(self.classify_failure(source)),
            }
            self.check_waiting(started, deadline, cancel)?;
            if let Ok(Some(st)) = self.child.try_wait() {
                // A reply may have been written just before exit: read until the end of the
                // stream first, unless a descendant still holds the channel open.
                if self.lines.is_empty() {
                    let how = describe_exit(&st);
                    self.finish_drains();
                    self.dead = Some(how.clone());
                    return Err(WorkerError::Died { how });
                }
            }
        }
    }

    /// The largest number of bytes the channel's read buffer ever held (at most
    /// [`Bounds::message`] + 1).
    pub fn read_buffer_peak(&self) -> usize {
        self.lines.peak()
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
        kg_proc::signal_group(self.pid, kg_proc::group::Signal::KILL);
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
        end_child_group(&mut self.child, Some(&tag_entry(&self.tag)));
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
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            end_child_group(&mut self.child, Some(&tag_entry(&self.tag)));
        } else {
            kg_proc::signal_group(self.pid, kg_proc::group::Signal::KILL);
            sweep_descendants(None, Some(&tag_entry(&self.tag)));
        }
    }
}

#[cfg(test)]
mod tests;
