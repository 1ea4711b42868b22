//! A Unix-socket proxy in front of the ledger's MariaDB server, for the
//! fault tests of a cluster whose link to the server is slow or cut: every
//! chunk either way waits `delay` before it is passed on, `cut` drops
//! every connection and refuses new ones until it is lifted, and `hang`
//! takes new connections and never answers them (a server or a network
//! that has stopped answering: the client waits for its timeouts).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct State {
    delay_ms: AtomicU64,
    cut: AtomicBool,
    hang: AtomicBool,
    /// Connections taken while hanging, held open unanswered.
    held: Mutex<Vec<UnixStream>>,
    stopped: AtomicBool,
    /// Both ends of every live connection, to shut down on a cut.
    live: Mutex<Vec<UnixStream>>,
}

pub struct SocketProxy {
    path: PathBuf,
    state: Arc<State>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl SocketProxy {
    /// Listens on `path` and passes each connection on to `upstream`.
    pub fn start(path: &Path, upstream: &Path) -> SocketProxy {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap_or_else(|e| panic!("proxy socket {}: {e}", path.display()));
        // slurmctld may run as another user inside a release root: anyone may connect.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let state = Arc::new(State::default());
        let (s, upstream) = (state.clone(), upstream.to_owned());
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if s.cut.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed
                }
                if s.hang.load(Ordering::SeqCst) {
                    s.held.lock().unwrap().push(client);
                    continue;
                }
                let Ok(server) = UnixStream::connect(&upstream) else { continue };
                {
                    let mut live = s.live.lock().unwrap();
                    live.extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                }
                for (from, to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    let s = s.clone();
                    std::thread::spawn(move || pass_on(from, to, &s));
                }
            }
        });
        SocketProxy { path: path.to_owned(), state, accept: Some(accept) }
    }

    /// Each chunk, either way, waits this long.
    pub fn set_delay(&self, delay: Duration) {
        self.state.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Cuts the link (every connection dropped, new ones refused), or
    /// restores it.
    pub fn set_cut(&self, cut: bool) {
        self.state.cut.store(cut, Ordering::SeqCst);
        if cut {
            for stream in self.state.live.lock().unwrap().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Stops answering: live connections are cut, new ones are taken and
    /// never answered; or, lifted, closes those and answers again.
    pub fn set_hang(&self, hang: bool) {
        self.state.hang.store(hang, Ordering::SeqCst);
        if hang {
            for stream in self.state.live.lock().unwrap().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        } else {
            self.state.held.lock().unwrap().clear();
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn pass_on(mut from: UnixStream, mut to: UnixStream, state: &State) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = state.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        if state.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

impl Drop for SocketProxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.set_cut(true);
        self.state.held.lock().unwrap().clear();
        // Wake the accepting thread.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
