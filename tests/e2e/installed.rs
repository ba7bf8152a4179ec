//! `automation install` run from almanac as each install method lays it out (README "Install"): the
//! scheduler entry names a path that stays valid across that method's upgrades, and a binary that would
//! vanish (npx's cache) is refused. The layouts are the methods' own: npm's global `lib/node_modules`
//! with the real launcher from `packaging/npm`, Homebrew's Cellar with its `bin/` and `opt/` links, and
//! the shell installer's `~/.local/bin`. They are made under cargo's target tmp dir, because a path in
//! a temporary directory is itself refused; `ALMANAC_TEST_NOT_TEMP` tells almanac that one is not, as
//! a clone in /tmp puts it there.
use crate::automation::{sched, Sched};
use std::path::{Path, PathBuf};
use std::process::Output;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("installed-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// This build's binary at `at` (a hard link where it can be, else a copy).
fn place(at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    let built = assert_cmd::cargo::cargo_bin("almanac");
    if std::fs::hard_link(&built, at).is_err() {
        std::fs::copy(&built, at).unwrap();
    }
}

fn symlink(target: &str, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// Runs `exe` with `first` on PATH, in the world of `s`. The fake schedulers come before all of them, so
/// that a directory such as node's (/usr/bin) never puts the user's real `crontab` first.
fn run(s: &Sched, exe: &Path, first: &[&Path], args: &[&str]) -> Output {
    let mut path = vec![s.bin.display().to_string()];
    path.extend(first.iter().map(|p| p.display().to_string()));
    path.push(s.path());
    std::process::Command::new(exe)
        .env_clear()
        .env("PATH", path.join(":"))
        .env("HOME", s.w.home())
        .env("ALMANAC_HOME", s.w.almanac_home())
        .env("FAKE_SCHED_DIR", &s.dir)
        .env("USER", "tester")
        // The installs are laid out under cargo's target directory, which a clone in /tmp puts in a
        // temporary directory (where a program is refused): that one is not.
        .env("ALMANAC_TEST_NOT_TEMP", env!("CARGO_TARGET_TMPDIR"))
        .current_dir(s.w.root())
        .args(args)
        .output()
        .unwrap()
}

const INSTALL: [&str; 4] = ["automation", "install", "--scheduler", "cron"];

/// The program `automation install` recorded, after checking the crontab line names it too.
fn scheduled(s: &Sched, out: &Output) -> PathBuf {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = s.config();
    let line = config
        .lines()
        .find_map(|l| l.strip_prefix("program = "))
        .unwrap_or_else(|| panic!("no program in config.toml:\n{config}"));
    let program: String = serde_json::from_str(line).unwrap();
    let tab = std::fs::read_to_string(s.dir.join("crontab")).unwrap_or_else(|e| {
        panic!(
            "no crontab ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            std::fs::read_to_string(s.dir.join("calls")).unwrap_or_default()
        )
    });
    assert!(
        tab.contains(&format!("'{program}' capture sweep"))
            || tab.contains(&format!("{program} capture sweep")),
        "{tab}"
    );
    PathBuf::from(program)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn npm_platform() -> String {
    let cpu = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("codealmanac-{}-{cpu}", std::env::consts::OS)
}

#[test]
fn an_npm_global_install_schedules_the_platform_binary_not_the_node_launcher() {
    let s = sched();
    let d = scratch();
    let prefix = d.path().join("npm-global");
    let pkg = prefix.join("lib/node_modules/codealmanac");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/npm/codealmanac");
    std::fs::copy(launcher.join("bin/almanac.js"), pkg.join("bin/almanac.js")).unwrap();
    std::fs::copy(launcher.join("package.json"), pkg.join("package.json")).unwrap();
    let binary = pkg.join(format!("node_modules/{}/bin/almanac", npm_platform()));
    place(&binary);
    // npm links the package's bin into <prefix>/bin.
    symlink(
        "../lib/node_modules/codealmanac/bin/almanac.js",
        &prefix.join("bin/almanac"),
    );
    let node = which("node").expect("node is on PATH");
    let first = [prefix.join("bin"), node.parent().unwrap().to_path_buf()];
    let first: Vec<&Path> = first.iter().map(|p| p.as_path()).collect();

    // The launcher passes arguments, output and the exit status through.
    let v = run(&s, &prefix.join("bin/almanac"), &first, &["--version"]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("almanac "));
    let bad = run(
        &s,
        &prefix.join("bin/almanac"),
        &first,
        &["no-such-command"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-command"));

    let out = run(&s, &prefix.join("bin/almanac"), &first, &INSTALL);
    assert_eq!(scheduled(&s, &out), binary);
}

#[test]
fn an_npm_install_without_its_platform_package_says_what_to_do() {
    let s = sched();
    let d = scratch();
    let pkg = d.path().join("lib/node_modules/codealmanac");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/npm/codealmanac/bin/almanac.js"),
        pkg.join("bin/almanac.js"),
    )
    .unwrap();
    let node = which("node").expect("node is on PATH");
    let out = std::process::Command::new(node)
        .arg(pkg.join("bin/almanac.js"))
        .arg("--version")
        .env("HOME", s.w.home())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&npm_platform())
            && err.contains("--omit=optional")
            && err.contains("cargo install codealmanac"),
        "{err}"
    );
}

#[test]
fn a_binary_in_npx_cache_is_refused_and_nothing_is_scheduled() {
    let s = sched();
    let binary =
        s.w.home()
            .join(".npm/_npx/5f2ac0a1b2c3d4e5/node_modules")
            .join(npm_platform())
            .join("bin/almanac");
    // Under the world's temp dir, which is refused as well: the test checks which reason is named.
    place(&binary);
    let out = run(&s, &binary, &[], &INSTALL);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("npx's cache") && err.contains("npm install -g codealmanac"),
        "{err}"
    );
    assert!(!s.config().contains("program ="), "{}", s.config());
    assert!(!s.dir.join("crontab").exists());
}

/// `npx almanac automation install` in a project that has codealmanac as its own dependency runs the
/// project's `node_modules/.bin/almanac`: refused with the global-install advice, nothing scheduled;
/// named with --program, scheduled as named.
#[test]
fn a_projects_own_node_modules_binary_is_refused_unless_named() {
    let s = sched();
    let d = scratch();
    let project = d.path().join("webapp");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        r#"{"name":"webapp","devDependencies":{"codealmanac":"^0.1.0"}}"#,
    )
    .unwrap();
    let pkg = project.join("node_modules/codealmanac");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/npm/codealmanac");
    std::fs::copy(launcher.join("bin/almanac.js"), pkg.join("bin/almanac.js")).unwrap();
    std::fs::copy(launcher.join("package.json"), pkg.join("package.json")).unwrap();
    // npm hoists the platform package beside it and links the bin into node_modules/.bin.
    let binary = project.join(format!("node_modules/{}/bin/almanac", npm_platform()));
    place(&binary);
    let bin = project.join("node_modules/.bin");
    symlink("../codealmanac/bin/almanac.js", &bin.join("almanac"));
    let node = which("node").expect("node is on PATH");
    let first = [bin.clone(), node.parent().unwrap().to_path_buf()];
    let first: Vec<&Path> = first.iter().map(|p| p.as_path()).collect();

    let out = run(&s, &bin.join("almanac"), &first, &INSTALL);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&project.display().to_string())
            && err.contains("npm install -g codealmanac")
            && err.contains("--program"),
        "{err}"
    );
    assert!(!s.config().contains("program ="), "{}", s.config());
    assert!(!s.dir.join("crontab").exists());

    let named = binary.display().to_string();
    let mut args = INSTALL.to_vec();
    args.extend(["--program", named.as_str()]);
    let out = run(&s, &bin.join("almanac"), &first, &args);
    assert_eq!(scheduled(&s, &out), binary);
}

#[test]
fn a_homebrew_install_schedules_the_link_that_brew_upgrade_keeps() {
    let s = sched();
    let d = scratch();
    let prefix = d.path().join("homebrew");
    let cellar = prefix.join("Cellar/almanac/0.1.0/bin/almanac");
    place(&cellar);
    symlink("../Cellar/almanac/0.1.0", &prefix.join("opt/almanac"));
    symlink(
        "../Cellar/almanac/0.1.0/bin/almanac",
        &prefix.join("bin/almanac"),
    );

    // Run as `almanac` from PATH: the PATH entry, a link into the current Cellar version.
    let out = run(
        &s,
        &prefix.join("bin/almanac"),
        &[&prefix.join("bin")],
        &INSTALL,
    );
    assert_eq!(scheduled(&s, &out), prefix.join("bin/almanac"));

    // Run by its Cellar path with Homebrew's bin not on PATH: the opt/ link, not the versioned path.
    let s = sched();
    let out = run(&s, &cellar, &[], &INSTALL);
    assert_eq!(scheduled(&s, &out), prefix.join("opt/almanac/bin/almanac"));
}

#[test]
fn the_shell_installers_directory_is_scheduled_as_is() {
    let s = sched();
    let d = scratch();
    let local = d.path().join("home/.local/bin");
    place(&local.join("almanac"));
    let out = run(&s, &local.join("almanac"), &[&local], &INSTALL);
    assert_eq!(scheduled(&s, &out), local.join("almanac"));
}
