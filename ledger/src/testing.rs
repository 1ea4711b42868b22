//! A private MariaDB server for tests and benchmarks (`features =
//! ["testing"]`): its own data directory and socket in a temporary
//! directory, no TCP, stopped on drop. Accounts: `allot` (every right,
//! password file mode 0600) and `reader` (SELECT only, mode 0644). Needs
//! Debian's mariadb-server (mariadbd, mariadb-install-db, mariadb).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private MariaDB server: its own data directory and socket, no TCP.
pub struct MariaDb {
    dir: tempfile::TempDir,
    /// `None` while stopped ([`MariaDb::kill`]).
    child: Option<Child>,
}

impl MariaDb {
    /// A new server in a temporary directory.
    pub fn start() -> MariaDb {
        Self::start_in(&std::env::temp_dir())
    }

    /// A new server in a new directory under `parent` (for a chrooted test
    /// cluster: a directory inside its root, so the daemons there reach
    /// the socket).
    pub fn start_in(parent: &Path) -> MariaDb {
        let dir = tempfile::Builder::new().prefix("mariadb.").tempdir_in(parent).unwrap();
        let data = dir.path().join("data");
        // `allot` writes (password file 0600), `reader` may only read.
        let accounts = "CREATE USER 'allot'@'localhost' IDENTIFIED BY 'w-secret';\n\
             GRANT ALL ON *.* TO 'allot'@'localhost';\n\
             CREATE USER 'reader'@'localhost' IDENTIFIED BY 'r-secret';\n\
             GRANT SELECT ON *.* TO 'reader'@'localhost';\n";
        let root = nix::unistd::Uid::effective().is_root();
        let user = if root { vec!["--user=root".to_owned()] } else { vec![] };
        let common = ["--no-defaults".to_owned(), format!("--datadir={}", data.display())];
        let status = Command::new("mariadb-install-db")
            .args(&common)
            .args(&user)
            // root logs in over the socket as whoever runs the test.
            .arg(format!("--auth-root-socket-user={}", nix::unistd::User::from_uid(nix::unistd::Uid::effective()).unwrap().unwrap().name))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db", "--skip-name-resolve", "--force"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("mariadb-install-db (Debian's mariadb-server) must be installed: scripts/install-deps.sh --accounting");
        assert!(status.success(), "mariadb-install-db failed");
        let mut server = MariaDb { dir, child: None };
        server.run();
        assert!(server.sql(accounts).success(), "creating the test accounts failed");
        for (name, secret) in [("writer.pass", "w-secret\n"), ("reader.pass", "r-secret\n")] {
            let p = server.dir.path().join(name);
            std::fs::write(&p, secret).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(if name == "reader.pass" { 0o644 } else { 0o600 })).unwrap();
        }
        server
    }

    /// Starts mariadbd on the data directory and waits for its socket.
    fn run(&mut self) {
        let dir = &self.dir;
        let data = dir.path().join("data");
        let socket = dir.path().join("mysqld.sock");
        let root = nix::unistd::Uid::effective().is_root();
        let user = if root { vec!["--user=root".to_owned()] } else { vec![] };
        let common = ["--no-defaults".to_owned(), format!("--datadir={}", data.display())];
        let child = Command::new("mariadbd")
            .args(&common)
            .args(&user)
            .arg(format!("--socket={}", socket.display()))
            .args(["--skip-networking", "--skip-name-resolve", "--innodb-log-file-size=4M", "--innodb-buffer-pool-size=32M"])
            .arg(format!("--pid-file={}", dir.path().join("mariadbd.pid").display()))
            .arg(format!("--log-error={}", dir.path().join("mariadbd.log").display()))
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "mariadbd did not start: {}", std::fs::read_to_string(dir.path().join("mariadbd.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the server at once (SIGKILL: a crash, or the host lost), as a
    /// fault test needs; [`MariaDb::restart`] brings it back on its data.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.dir.path().join("mysqld.sock"));
    }

    /// Starts the server again on the same data (after [`MariaDb::kill`]).
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    /// Starts SQL as the server's root in the background (for a test that
    /// holds a lock while the code under test runs).
    pub fn spawn_sql(&self, sql: &str) -> Child {
        Command::new("mariadb")
            .args(["--no-defaults", &format!("--socket={}", self.dir.path().join("mysqld.sock").display()), "-uroot", "-e", sql])
            .stdout(Stdio::null())
            .spawn()
            .expect("the mariadb client")
    }

    /// Runs SQL as the server's root (the `mariadb` client, over the socket).
    pub fn sql(&self, sql: &str) -> std::process::ExitStatus {
        Command::new("mariadb")
            .args(["--no-defaults", &format!("--socket={}", self.dir.path().join("mysqld.sock").display()), "-uroot", "-e", sql])
            .status()
            .expect("the mariadb client")
    }

    /// A ledger URL on database `database` as `allot` (may write; its
    /// password file is 0600) or `reader` (SELECT only; 0644).
    pub fn url(&self, user: &str, database: &str) -> String {
        let pass = self.dir.path().join(if user == "reader" { "reader.pass" } else { "writer.pass" });
        format!("mysql://{user}@localhost/{database}?socket={}&password_file={}", self.dir.path().join("mysqld.sock").display(), pass.display())
    }

    /// Makes a new, empty database.
    pub fn create_database(&self, name: &str) {
        assert!(self.sql(&format!("CREATE DATABASE `{name}`")).success(), "CREATE DATABASE {name} failed");
    }

    /// The server's directory (data, socket, log, the password files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else { return };
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
