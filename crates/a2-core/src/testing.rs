//! What the stores' throwaway test servers share (feature `testing`): a
//! free loopback port, a watchdog that kills a server once the test
//! process is gone, and the kill and the patient restart of a server
//! process. Never enable it in an application.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Asks the OS for a free loopback port.
pub fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Starts a shell loop (named `name`) that kills the server process `pid`
/// with SIGKILL, and removes `dir`, once this test process is gone; it
/// exits by itself when the server stops first. So a `static` server, or
/// the servers of a test binary that aborts, do not outlive the tests.
pub fn watch(pid: u32, dir: &Path, name: &str) -> io::Result<()> {
    let script = r#"
parent="$1"; server="$2"; dir="$3"
while kill -0 "$parent" 2>/dev/null; do
  kill -0 "$server" 2>/dev/null || exit 0
  sleep 0.2
done
kill -9 "$server" 2>/dev/null
sleep 0.5
rm -rf "$dir"
"#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(name)
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(())
}

/// Kills the server process in `child`, if any, with SIGKILL and waits for
/// it: an abrupt failure, with no chance to save or say goodbye.
pub fn kill(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Calls `spawn` until it succeeds, every `pause`, for at most `timeout`
/// (the old server's port or files may linger for a moment after a kill).
///
/// # Panics
/// With `what` and the last error when `spawn` never succeeds.
pub fn respawn(
    what: &str,
    timeout: Duration,
    pause: Duration,
    mut spawn: impl FnMut() -> io::Result<()>,
) {
    let deadline = Instant::now() + timeout;
    loop {
        match spawn() {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("{what} did not come back: {e}"),
            Err(_) => std::thread::sleep(pause),
        }
    }
}
