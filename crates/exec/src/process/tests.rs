use super::*;
use serde_json::json;
use std::path::Path;

fn test_python() -> PathBuf {
    PathBuf::from(std::env::var("PYTHON_BIN").unwrap_or_else(|_| "python3".into()))
}

/// A worker over the real `kg_wire` channel that sends a descriptor of a file it opens
/// (`send`) or reads from the descriptor it receives (`recv`).
fn fd_worker(dir: &Path, sandbox: Option<crate::sandbox::Sandbox>, label: &str) -> Worker {
    let py = dir.join(format!("py-{label}"));
    crate::scripts::install(&py).unwrap();
    let script = dir.join(format!("{label}.py"));
    std::fs::write(
        &script,
        format!(
            "import os, sys\nsys.path.insert(0, {py:?})\nimport kg_wire as kg\n\
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
        python: crate::python::sandbox_paths(&test_python())
            .unwrap()
            .executable,
        script,
        cwd: dir.to_path_buf(),
        env: Vec::new(),
        allow_listed_env: false,
        bounds: Bounds::default(),
        label: label.into(),
        sandbox,
        sys_path: None,
    };
    Worker::spawn(&spec, Duration::from_secs(30), &CancelToken::new()).unwrap()
}

#[test]
fn descriptors_travel_from_a_sandboxed_worker_through_the_parent_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload");
    std::fs::write(&file, "what the pool holds").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let python = test_python();
    let paths = crate::python::sandbox_paths(&python).unwrap();
    let mut read = paths.read;
    read.push(dir.path().to_path_buf());
    let view = crate::sandbox::View {
        read,
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let sb = crate::sandbox::Sandbox::candidate(view, 60, 1 << 30);
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

/// A worker that says it is ready, reads one request and then runs `body` (Python).
fn raw_worker(
    dir: &Path,
    body: &str,
    bounds: Bounds,
    connect: Duration,
) -> Result<Worker, WorkerError> {
    let script = dir.join("raw.py");
    std::fs::write(
        &script,
        format!("import os, socket, sys\nsock = socket.socket(fileno=int(sys.argv[1]))\n{body}\n"),
    )
    .unwrap();
    let spec = WorkerSpec {
        python: test_python(),
        script,
        cwd: dir.to_path_buf(),
        env: Vec::new(),
        allow_listed_env: false,
        bounds,
        label: "raw".into(),
        sandbox: None,
        sys_path: None,
    };
    Worker::spawn(&spec, connect, &CancelToken::new())
}

#[test]
fn a_worker_streaming_without_newlines_is_killed_at_the_message_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        message: 256 * 1024,
        request: 1 << 30,
    };
    let mut w = raw_worker(
        dir.path(),
        "sock.sendall(b'{\"ready\": true}\\n')\nsock.recv(100)\n\
         while True:\n    sock.sendall(b'x' * 65536)",
        bounds,
        Duration::from_secs(30),
    )
    .unwrap();
    let t = Instant::now();
    let deadline = t + Duration::from_secs(10);
    let e = w
        .request(&json!({"op": "x"}), deadline, &CancelToken::new())
        .unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        matches!(e, WorkerError::Protocol(ProtocolError::MessageTooLong { limit }) if limit == bounds.message),
        "{e}"
    );
    assert!(e.to_string().contains("262144 bytes"), "{e}");
    assert!(w.is_dead());
    assert!(
        w.read_buffer_peak() <= bounds.message + 1,
        "the read buffer grew to {} bytes",
        w.read_buffer_peak()
    );
}

#[test]
fn many_short_lines_end_at_the_request_bound_and_a_stall_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        message: 1024,
        request: 64 * 1024,
    };
    let aside = "sock.sendall(b'{\"aside\": true, \"op\": \"timed_key\", \"index\": 0}\\n')";
    let ready = "sock.sendall(b'{\"ready\": true}\\n')\nsock.recv(100)";
    let cancel = CancelToken::new();
    // Asides, each answered and its answer read, for ever: the request's total bound ends it.
    let mut w = raw_worker(
        dir.path(),
        &format!("{ready}\nwhile True:\n    {aside}\n    sock.recv(100)"),
        bounds,
        Duration::from_secs(30),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = w
        .request_with(&json!({"op": "x"}), deadline, &cancel, &mut no_asides)
        .unwrap_err();
    assert!(
        matches!(
            e,
            WorkerError::Protocol(ProtocolError::RequestTooLarge { .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("65536 bytes"), "{e}");
    // Asides whose answers are never read: our writes back fill the socket, and the
    // request still ends (by a bound or at its deadline), never blocked in a write.
    let mut w = raw_worker(
        dir.path(),
        &format!("{ready}\nwhile True:\n    {aside}"),
        Bounds {
            message: 1024,
            request: 1 << 30,
        },
        Duration::from_secs(30),
    )
    .unwrap();
    let t = Instant::now();
    let e = w
        .request_with(
            &json!({"op": "x"}),
            t + Duration::from_secs(2),
            &cancel,
            &mut no_asides,
        )
        .unwrap_err();
    assert!(matches!(e, WorkerError::Timeout { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    // A worker that sends a partial line and stops: the deadline still holds.
    let mut w = raw_worker(
        dir.path(),
        &format!("{ready}\nsock.sendall(b'{{\"result\"')\nimport time\ntime.sleep(60)"),
        bounds,
        Duration::from_secs(30),
    )
    .unwrap();
    let t = Instant::now();
    let e = w
        .request(&json!({"op": "x"}), t + Duration::from_millis(500), &cancel)
        .unwrap_err();
    assert!(matches!(e, WorkerError::Timeout { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn a_worker_that_never_gets_ready_times_out_or_dies_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let e = raw_worker(
        dir.path(),
        "sys.stderr.write('stuck importing\\n')\nimport time\ntime.sleep(60)",
        Bounds::default(),
        Duration::from_millis(1500),
    )
    .unwrap_err();
    let WorkerError::NotStarted { why, .. } = &e else {
        panic!("{e}")
    };
    assert!(matches!(**why, WorkerError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("stuck importing"), "{e}");
    let e = raw_worker(
        dir.path(),
        "sys.stderr.write('no torch here\\n')\nsys.exit(3)",
        Bounds::default(),
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no torch here"), "{e}");
    assert!(
        e.to_string().contains("status 3") || e.to_string().contains("closed"),
        "{e}"
    );
    // Something other than the ready line first is a protocol error.
    let e = raw_worker(
        dir.path(),
        "sock.sendall(b'{\"result\": \"ok\"}\\n')\nimport time\ntime.sleep(60)",
        Bounds::default(),
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert!(e.to_string().contains("ready line"), "{e}");
}

#[test]
fn the_channel_is_no_path_and_only_the_worker_holds_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = raw_worker(
        dir.path(),
        "import json, stat\nsock.sendall(b'{\"ready\": true}\\n')\nsock.recv(100)\n\
         st = os.fstat(sock.fileno())\n\
         r = {'result': 'ok', 'sock': stat.S_ISSOCK(st.st_mode), 'name': repr(sock.getsockname()),\n\
              'peer': repr(sock.getpeername())}\n\
         sock.sendall((json.dumps(r) + '\\n').encode())\nsock.recv(100)",
        Bounds::default(),
        Duration::from_secs(30),
    )
    .unwrap();
    let r = w
        .request(
            &json!({"op": "x"}),
            Instant::now() + Duration::from_secs(10),
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r["sock"], true, "{r}");
    // An unnamed socketpair: neither end has an address anyone could bind or connect to.
    assert!(
        matches!(r["name"].as_str(), Some("''") | Some("b''")),
        "{r}"
    );
    assert!(
        matches!(r["peer"].as_str(), Some("''") | Some("b''")),
        "{r}"
    );
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().ends_with(".sock")),
        "a socket file in the session directory"
    );
}
