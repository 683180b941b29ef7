use super::*;
use kg_contract::Layer;
use std::io::Read;

#[test]
fn fd_paths_are_written_without_allocating() {
    let mut buf = [0u8; 32];
    assert_eq!(
        fd_path(&mut buf, 0).unwrap().to_str().unwrap(),
        "/proc/self/fd/0"
    );
    assert_eq!(
        fd_path(&mut buf, 1_234_567_890).unwrap().to_str().unwrap(),
        "/proc/self/fd/1234567890"
    );
    assert!(fd_path(&mut buf, -1).is_none());
}

fn bare() -> Sandbox {
    Sandbox {
        limits: Limits {
            open_files: None,
            processes: None,
            cpu_seconds: None,
            file_bytes: None,
            core_bytes: Some(0),
            data_bytes: None,
            nice: None,
        },
        no_network: false,
        pid_namespace: true,
        view: None,
        user: None,
        no_privileges: false,
        seccomp: false,
        refuse_shared_memory: false,
        cgroup: false,
    }
}

/// A worker killed by a signal is seen by the parent as killed by that signal, through
/// the PID-namespace relay; the relay holds none of the parent's other descriptors.
#[test]
fn a_signal_death_is_mirrored_through_the_relay() {
    use std::os::unix::process::ExitStatusExt;
    let sb = bare();
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg("echo ready; exec sleep 30");
    cmd.stdout(std::process::Stdio::piped());
    let _cg = sb.apply(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut first = [0u8; 6];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let relay = child.id();
    let kids =
        std::fs::read_to_string(format!("/proc/{relay}/task/{relay}/children")).unwrap_or_default();
    let worker = kids
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("this host refused the PID namespace: no relay to check"));
    let fds = std::fs::read_dir(format!("/proc/{relay}/fd"))
        .unwrap()
        .count();
    assert!(fds <= 3, "the relay holds {fds} descriptors");
    let worker = rustix::process::Pid::from_raw(worker.parse().unwrap()).unwrap();
    rustix::process::kill_process(worker, rustix::process::Signal::KILL).unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
}

/// Runs a shell under the candidate sandbox and checks from inside and outside that every
/// layer took effect: it is the machine CI runs on (root, namespaces allowed), so a missing
/// layer fails here rather than being skipped.
#[test]
fn every_layer_holds_in_a_real_child() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let ro_dir = base.join("problem");
    let scratch = base.join("scratch");
    std::fs::create_dir(&ro_dir).unwrap();
    std::fs::create_dir(&scratch).unwrap();
    let marker = format!("kg-sandbox-test-{}", std::process::id());
    let view = View {
        read: vec![ro_dir.clone()],
        write: vec![scratch.clone()],
        cwd: Some(scratch.clone()),
        ..View::default()
    };
    let mut sb = Sandbox::candidate(view, 60, 1 << 30);
    sb.limits.open_files = Some(77);
    sb.refuse_shared_memory = true;
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(
        r#"echo "uid $(id -u)"; echo "nofile $(ulimit -n)"; echo "data $(ulimit -d)";
           { echo x > "$1/planted"; } 2>/dev/null && echo "ro wrote" || echo "ro refused";
           { echo x > "$2/mine"; } 2>/dev/null && echo "scratch wrote" || echo "scratch refused";
           { echo x > ./cwd-file; } 2>/dev/null && echo "cwd wrote" || echo "cwd refused";
           { echo x > "/tmp/$3"; } 2>/dev/null && echo "tmp wrote" || echo "tmp refused";
           { echo x > /usr/kg-planted; } 2>/dev/null && echo "usr wrote" || echo "usr refused";
           echo "pid $$"; echo "procs $(ls /proc | grep -c '^[0-9]')";
           grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status | tr -d '\t';
           read _; exit 7"#,
    );
    cmd.arg("sh").arg(&ro_dir).arg(&scratch).arg(&marker);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let _cg = sb.apply(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let seen = observe(child.id(), &sb.expected(_cg.as_ref())).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let has = |l: &str| text.lines().any(|x| x.trim() == l);
    let root = rustix::process::geteuid().is_root();
    if root {
        assert!(has(&format!("uid {SANDBOX_UID}")), "{text}");
    }
    assert!(has("nofile 77"), "{text}");
    assert!(has(&format!("data {}", (1u64 << 30) / 1024)), "{text}");
    assert!(has("ro refused"), "{text}");
    assert!(has("scratch wrote"), "{text}");
    assert!(has("cwd wrote"), "{text}");
    assert!(has("tmp wrote"), "{text}");
    assert!(has("usr refused"), "{text}");
    assert!(has("pid 1"), "process 1 of its namespace: {text}");
    assert!(has("Seccomp:2"), "{text}");
    assert!(has("NoNewPrivs:1"), "{text}");
    assert!(has("CapEff:0000000000000000"), "{text}");
    assert_eq!(
        out.status.code(),
        Some(7),
        "the relay ends as the worker did"
    );
    assert!(!ro_dir.join("planted").exists());
    assert!(scratch.join("mine").exists() && scratch.join("cwd-file").exists());
    assert!(
        !Path::new("/tmp").join(&marker).exists(),
        "the private /tmp leaked into the host's"
    );
    assert!(!Path::new("/usr/kg-planted").exists());
    let missing = seen.missing();
    let expect_missing: Vec<Layer> = if root {
        vec![]
    } else {
        // Without root, our own uid is kept (mapped in a user namespace).
        vec![Layer::UnprivilegedUser, Layer::ProcessLimit]
    };
    assert_eq!(missing, expect_missing, "{}", seen.summary());
    // Our own namespace is untouched either way.
    std::fs::write(ro_dir.join("ours"), "y").unwrap();
}

/// A directory the sandbox uid cannot search (like root's 0700 home holding the
/// interpreter) is masked, and the paths the worker needs below it are bound back readable.
#[test]
fn paths_under_a_directory_the_sandbox_uid_cannot_search_stay_readable() {
    if !rustix::process::geteuid().is_root() {
        panic!("this test needs root (it checks the uid change); CI runs as root");
    }
    use std::os::unix::fs::PermissionsExt;
    // Not under /tmp, which is masked anyway: the interpreter case is a home directory.
    let home = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let home = home.path().canonicalize().unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let lib = home.join("py/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("module.py"), "ok\n").unwrap();
    let secret = home.join("secret.txt");
    std::fs::write(&secret, "s\n").unwrap();
    let view = View {
        read: vec![lib.clone()],
        ..View::default()
    };
    let sb = Sandbox::candidate(view, 60, 1 << 30);
    let out = {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"cat "$1/module.py"; cat "$2" 2>/dev/null || echo "secret hidden""#)
            .arg("sh")
            .arg(&lib)
            .arg(&secret);
        let _cg = sb.apply(&mut cmd);
        cmd.output().unwrap()
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "ok"), "{text}");
    assert!(text.lines().any(|l| l == "secret hidden"), "{text}");
}

#[test]
fn only_mapped_ids_are_dropped_to() {
    assert!(map_contains(
        "         0          0 4294967295\n",
        SANDBOX_UID
    ));
    // A rootless container that maps its root alone.
    assert!(!map_contains(
        "         0       1000          1\n",
        SANDBOX_UID
    ));
    assert!(map_contains("0 1000 1\n1 100000 65536\n", SANDBOX_UID));
}

/// RLIMIT_DATA alone is no memory limit (shared mappings escape it); with shared memory refused
/// by the filter it is.
#[test]
fn only_a_limit_that_counts_shared_mappings_is_reported_as_held() {
    let held = |bound: bool| {
        let mut sb = Sandbox::candidate(View::default(), 60, 1 << 30);
        sb.cgroup = false;
        sb.refuse_shared_memory = bound;
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("read _");
        cmd.stdin(std::process::Stdio::piped());
        let cg = sb.apply(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let seen = observe(child.id(), &sb.expected(cg.as_ref())).unwrap();
        drop(child.stdin.take());
        child.wait().unwrap();
        seen.layers
            .into_iter()
            .find(|l| l.layer == Layer::MemoryLimit)
            .unwrap()
    };
    let data_only = held(false);
    assert!(!data_only.held, "{}", data_only.detail);
    assert!(
        data_only.detail.contains("not counted"),
        "{}",
        data_only.detail
    );
    let bounded = held(true);
    assert!(bounded.held, "{}", bounded.detail);
    assert!(bounded.detail.contains("refused"), "{}", bounded.detail);
}

/// A covered file reads as `/dev/null` in the worker (as a GPU's device nodes do for the
/// precompiler), cannot be uncovered or written, and is untouched outside.
#[test]
fn a_covered_file_is_dev_null_in_the_worker_and_itself_outside() {
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let base = dir.path().canonicalize().unwrap();
    let node = base.join("nvidia0");
    std::fs::write(&node, "device\n").unwrap();
    let view = View {
        read: vec![base.clone()],
        cover: vec![node.clone()],
        ..View::default()
    };
    let sb = Sandbox::candidate(view, 60, 1 << 30);
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(
        r#"echo "read [$(cat "$1")]"; ls -l "$1" | cut -c1;
           umount "$1" 2>/dev/null && echo "uncovered [$(cat "$1")]" || echo "umount refused";
           { echo x > "$1"; } 2>/dev/null; echo "after [$(cat "$1")]""#,
    );
    cmd.arg("sh").arg(&node);
    cmd.stdout(std::process::Stdio::piped());
    let _cg = sb.apply(&mut cmd);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let has = |l: &str| text.lines().any(|x| x.trim() == l);
    assert!(has("read []"), "{text}");
    assert!(has("c"), "a character device, /dev/null: {text}");
    assert!(has("umount refused"), "{text}");
    assert!(has("after []"), "{text}");
    assert_eq!(std::fs::read_to_string(&node).unwrap(), "device\n");
}

/// A worker given a niceness runs at it and cannot take it back.
#[test]
fn a_niced_worker_cannot_raise_its_priority_again() {
    let mut sb = Sandbox::candidate(View::default(), 60, 1 << 30);
    sb.limits.nice = Some(19);
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(
        r#"echo "nice $(cut -d' ' -f19 /proc/self/stat)";
           renice -n 0 -p $$ >/dev/null 2>&1 && echo "reniced" || echo "renice refused""#,
    );
    cmd.stdout(std::process::Stdio::piped());
    let _cg = sb.apply(&mut cmd);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.trim() == "nice 19"), "{text}");
    assert!(text.lines().any(|l| l.trim() == "renice refused"), "{text}");
}
