//! The shell installer, `scripts/install.sh`, run with `/bin/sh` as `curl … | sh` runs it, against
//! stub `curl` and `wget` that log their arguments and fail, so nothing leaves the machine
//! (docs/releasing.md, "What the installers trust"). It must never read the current directory: the
//! default download URL is also a valid relative path (`https:` is a legal directory name and `//`
//! collapses), so a cloned repository can carry `https:/github.com/codealmanac/almanac/releases/
//! latest/download/` with a release of its own. These tests need no almanac binary: the "release"
//! they make holds a script named `almanac` that leaves a marker file when it runs.
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const INSTALLER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh");
/// The installer's default download base, and its base for `ALMANAC_VERSION=0.1.0`.
const LATEST: &str = "https://github.com/codealmanac/almanac/releases/latest/download";
const V0_1_0: &str = "https://github.com/codealmanac/almanac/releases/download/v0.1.0";
/// The archives the shell installer can pick; a release here holds all of them, so the test does
/// not depend on this machine's CPU.
const TARGETS: [&str; 4] = [
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
];
/// What the installer prints before its PATH advice.
const ADVICE: &str = "almanac installer:   ";

/// The archive the installer picks on this machine.
fn host_archive() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x86_64",
        "aarch64" => "aarch64",
        other => panic!("the installer has no build for {other}"),
    };
    let os = if cfg!(target_os = "macos") {
        "apple-darwin"
    } else {
        "unknown-linux-gnu"
    };
    format!("almanac-{arch}-{os}.tar.gz")
}

fn sha256_hex(file: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(file).unwrap()))
}

fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A scratch world: a HOME, a TMPDIR, stub network tools, and a log of their calls.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        let s = Scene {
            dir: tempfile::Builder::new()
                .prefix("installer-")
                .tempdir()
                .unwrap(),
        };
        std::fs::create_dir_all(s.home()).unwrap();
        std::fs::create_dir_all(s.root().join("tmp")).unwrap();
        let log = s.log();
        for tool in ["curl", "wget"] {
            // One line per call: the tool, then each argument, tab-separated. `wget --help` answers
            // as GNU wget's does; everything else fails, as with no network.
            write_script(
                &s.stubs().join(tool),
                &format!(
                    "#!/bin/sh\nprintf '%s' {tool} >>'{log}'\nfor a in \"$@\"; do printf '\\t%s' \"$a\" >>'{log}'; done\necho >>'{log}'\ncase \"$1\" in --help) echo '  --https-only  --secure-protocol=PR'; exit 0 ;; esac\nexit 7\n",
                    log = log.display()
                ),
            );
        }
        // The shells the PATH advice ends by starting: here they start nothing.
        for shell in ["bash", "zsh"] {
            write_script(&s.stubs().join(shell), "#!/bin/sh\nexit 0\n");
        }
        s
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn home(&self) -> PathBuf {
        self.root().join("home")
    }

    fn stubs(&self) -> PathBuf {
        self.root().join("stubs")
    }

    fn log(&self) -> PathBuf {
        self.root().join("network.log")
    }

    /// Written by the `almanac` of the releases made here, each time it runs.
    fn marker(&self) -> PathBuf {
        self.root().join("almanac-ran")
    }

    /// The default install directory.
    fn bin(&self) -> PathBuf {
        self.home().join(".local/bin")
    }

    /// The fixed PATH: the stubs, then the system's tools.
    fn path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.stubs().display())
    }

    /// Writes a release into `dir`: an archive per target, each holding an `almanac` that leaves
    /// the marker, and a SHA256SUMS that matches them.
    fn release(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        let stage = self.root().join("stage");
        let mut sums = String::new();
        for t in TARGETS {
            let top = format!("almanac-{t}");
            write_script(
                &stage.join(&top).join("almanac"),
                &format!(
                    "#!/bin/sh\necho ran >>'{}'\necho 'almanac 9.9.9 (commit lookalike)'\n",
                    self.marker().display()
                ),
            );
            let archive = dir.join(format!("{top}.tar.gz"));
            let status = Command::new("tar")
                .arg("-C")
                .arg(&stage)
                .arg("-czf")
                .arg(&archive)
                .arg(&top)
                .status()
                .unwrap();
            assert!(status.success(), "tar failed");
            sums.push_str(&format!("{}  {top}.tar.gz\n", sha256_hex(&archive)));
        }
        std::fs::write(dir.join("SHA256SUMS"), sums).unwrap();
    }

    /// `/bin/sh scripts/install.sh` in `cwd`, with nothing of this process's environment but what
    /// is set here (and then `env`).
    fn install_with_path(&self, path: &str, cwd: &Path, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new("/bin/sh");
        c.arg(INSTALLER)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.home())
            .env("TMPDIR", self.root().join("tmp"))
            .env("SHELL", "/bin/sh")
            .current_dir(cwd)
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn install(&self, cwd: &Path, env: &[(&str, &str)]) -> Output {
        self.install_with_path(&self.path(), cwd, env)
    }

    /// The stub network tools' calls, each as the tool and its arguments.
    fn calls(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    }

    /// Fails unless nothing was installed and no almanac of a release here ever ran.
    fn assert_nothing_installed(&self, out: &Output) {
        assert!(
            !out.status.success(),
            "the installer succeeded:\n{}",
            text(out)
        );
        assert!(
            !self.marker().exists(),
            "the release's almanac ran:\n{}",
            text(out)
        );
        assert!(
            !self.bin().exists(),
            "the installer made {}:\n{}",
            self.bin().display(),
            text(out)
        );
    }
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Where the look-alike of `url` lies under `repo`: `https://a/b` as the relative path `https:/a/b`.
fn lookalike(repo: &Path, url: &str) -> PathBuf {
    repo.join(url.replacen("https://", "https:/", 1))
}

/// Checks that every curl call was held to https (TLS 1.2 or later) and asked only for files of
/// `url`, the first being its SHA256SUMS.
fn assert_curl_asked_only(calls: &[Vec<String>], url: &str) {
    assert!(!calls.is_empty(), "nothing was downloaded");
    for call in calls {
        assert_eq!(call[0], "curl", "{call:?}");
        assert!(
            call.windows(2)
                .any(|w| w[0] == "--proto" && w[1] == "=https"),
            "curl was not limited to https: {call:?}"
        );
        assert!(call.iter().any(|a| a == "--tlsv1.2"), "{call:?}");
        assert!(
            call.last().unwrap().starts_with(&format!("{url}/")),
            "{call:?}"
        );
    }
    assert_eq!(calls[0].last().unwrap(), &format!("{url}/SHA256SUMS"));
}

#[test]
fn a_lookalike_of_the_download_url_in_the_current_directory_is_never_installed() {
    for (version, url) in [(None, LATEST), (Some("0.1.0"), V0_1_0)] {
        let s = Scene::new();
        let repo = s.root().join("repo");
        let tree = lookalike(&repo, url);
        s.release(&tree);

        // The look-alike is a release the installer would take when told to, by its absolute path.
        let control = s.root().join("control-bin");
        let out = s.install(
            s.root(),
            &[
                ("ALMANAC_DOWNLOAD_BASE", tree.to_str().unwrap()),
                ("ALMANAC_INSTALL_DIR", control.to_str().unwrap()),
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
        assert!(control.join("almanac").is_file() && s.marker().exists());
        std::fs::remove_file(s.marker()).unwrap();

        // Run inside the repository as `curl … | sh` runs it, it asks the network and nothing else.
        let env: Vec<(&str, &str)> = version
            .map(|v| ("ALMANAC_VERSION", v))
            .into_iter()
            .collect();
        let out = s.install(&repo, &env);
        s.assert_nothing_installed(&out);
        assert_curl_asked_only(&s.calls(), url);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("cannot download {url}/SHA256SUMS")),
            "{stderr}"
        );
    }
}

#[test]
fn with_only_wget_the_lookalike_is_not_installed_and_wget_is_held_to_https() {
    let s = Scene::new();
    let repo = s.root().join("repo");
    s.release(&lookalike(&repo, LATEST));
    // A PATH with the installer's tools but no curl: the stub wget, then links to the system's.
    let wget_only = s.root().join("wget-only");
    std::fs::create_dir_all(&wget_only).unwrap();
    std::fs::copy(s.stubs().join("wget"), wget_only.join("wget")).unwrap();
    let tools = s.root().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let names = [
        "awk",
        "basename",
        "cat",
        "chmod",
        "cp",
        "grep",
        "gzip",
        "ldd",
        "mkdir",
        "mktemp",
        "mv",
        "printf",
        "rm",
        "sed",
        "sha256sum",
        "shasum",
        "sysctl",
        "tar",
        "uname",
    ];
    for name in names {
        if let Some(p) = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
        {
            std::os::unix::fs::symlink(p, tools.join(name)).unwrap();
        }
    }
    let path = format!("{}:{}", wget_only.display(), tools.display());

    let out = s.install_with_path(&path, &repo, &[]);
    s.assert_nothing_installed(&out);
    let calls = s.calls();
    let downloads: Vec<_> = calls.iter().filter(|c| c[1] != "--help").collect();
    assert!(
        !downloads.is_empty(),
        "nothing was downloaded:\n{}",
        text(&out)
    );
    for call in downloads {
        assert_eq!(call[0], "wget", "{call:?}");
        assert!(call.iter().any(|a| a == "--https-only"), "{call:?}");
        assert!(
            call.iter().any(|a| a == "--secure-protocol=TLSv1_2"),
            "{call:?}"
        );
        assert!(
            call.last().unwrap().starts_with(&format!("{LATEST}/")),
            "{call:?}"
        );
    }
}

#[test]
fn a_relative_download_directory_is_refused_by_name() {
    let s = Scene::new();
    let repo = s.root().join("repo");
    s.release(&repo.join("dist"));
    s.release(&lookalike(&repo, LATEST));
    let spelled_out = LATEST.replacen("https://", "https:/", 1);
    for base in ["dist", "./dist/", spelled_out.as_str()] {
        let out = s.install(&repo, &[("ALMANAC_DOWNLOAD_BASE", base)]);
        s.assert_nothing_installed(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("ALMANAC_DOWNLOAD_BASE is {base}, a relative path"))
                && stderr.contains("absolute path"),
            "{stderr}"
        );
        assert!(s.calls().is_empty(), "{:?}", s.calls());
    }
}

#[test]
fn plain_http_is_taken_only_from_this_machine() {
    let s = Scene::new();
    for base in [
        "http://example.com/dist",
        "http://127.0.0.1.example.com/dist",
        "http://127.0.0.1:80@example.com/dist",
        "http://localhost#@example.com/dist",
    ] {
        let out = s.install(s.root(), &[("ALMANAC_DOWNLOAD_BASE", base)]);
        s.assert_nothing_installed(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(base) && stderr.contains("plain http://"),
            "{stderr}"
        );
        assert!(s.calls().is_empty(), "{base}: {:?}", s.calls());
    }
    // A server on this machine (as scripts/check_release.sh runs one) is asked over http only.
    let out = s.install(
        s.root(),
        &[("ALMANAC_DOWNLOAD_BASE", "http://127.0.0.1:9/dist/")],
    );
    s.assert_nothing_installed(&out);
    let calls = s.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0]
            .windows(2)
            .any(|w| w[0] == "--proto" && w[1] == "=http"),
        "{calls:?}"
    );
    assert_eq!(
        calls[0].last().unwrap(),
        "http://127.0.0.1:9/dist/SHA256SUMS"
    );
}

#[test]
fn a_checksum_mismatch_names_the_file_and_both_sums() {
    let s = Scene::new();
    let dist = s.root().join("dist");
    s.release(&dist);
    let file = dist.join(host_archive());
    let want = sha256_hex(&file);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.push(0);
    std::fs::write(&file, bytes).unwrap();
    let got = sha256_hex(&file);

    let out = s.install(
        s.root(),
        &[("ALMANAC_DOWNLOAD_BASE", dist.to_str().unwrap())],
    );
    s.assert_nothing_installed(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "checksum mismatch: {} has SHA-256 {got}, but SHA256SUMS says {want}",
            file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn the_path_advice_for_a_directory_with_quotes_puts_exactly_it_on_path() {
    let s = Scene::new();
    let dist = s.root().join("dist");
    s.release(&dist);
    let dest = s.root().join(r#"it's "my" $HOME `id` \bin"#);
    for (shell, rc) in [("bash", ".bashrc"), ("zsh", ".zshrc")] {
        let login_shell = format!("/bin/{shell}");
        let out = s.install(
            s.root(),
            &[
                ("ALMANAC_DOWNLOAD_BASE", dist.to_str().unwrap()),
                ("ALMANAC_INSTALL_DIR", dest.to_str().unwrap()),
                ("SHELL", login_shell.as_str()),
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
        assert!(dest.join("almanac").is_file());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(ADVICE))
            .unwrap_or_else(|| panic!("no PATH advice:\n{stdout}"));

        // The line as the user pastes it (its `exec bash` starts the stub), then the startup file
        // it wrote, read by a new shell.
        let pasted = Command::new("/bin/sh")
            .args(["-c", line])
            .env_clear()
            .env("PATH", s.path())
            .env("HOME", s.home())
            .current_dir(s.home())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(pasted.status.success(), "{line}\n{}", text(&pasted));
        let read = Command::new("/bin/sh")
            .args(["-c", &format!(". \"$HOME/{rc}\" && printf '%s' \"$PATH\"")])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", s.home())
            .output()
            .unwrap();
        assert!(read.status.success(), "{line}\n{}", text(&read));
        let path = String::from_utf8(read.stdout).unwrap();
        assert_eq!(
            path.split(':').next(),
            Some(dest.to_str().unwrap()),
            "advice: {line}"
        );
        std::fs::remove_file(s.home().join(rc)).unwrap();
    }

    // fish's single quotes take \' and \\ as escapes.
    let out = s.install(
        s.root(),
        &[
            ("ALMANAC_DOWNLOAD_BASE", dist.to_str().unwrap()),
            ("ALMANAC_INSTALL_DIR", dest.to_str().unwrap()),
            ("SHELL", "/usr/bin/fish"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let fish = format!(
        "fish_add_path '{}'",
        dest.to_str()
            .unwrap()
            .replace('\\', r"\\")
            .replace('\'', r"\'")
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.strip_prefix(ADVICE) == Some(&fish)),
        "want {fish}:\n{}",
        text(&out)
    );
}
