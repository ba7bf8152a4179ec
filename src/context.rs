//! Everything the outside world gives a command, in one value: home directories, environment, the clock.
//! Tests control all of it through the environment of the binary (HOME, ALMANAC_HOME, store variables).

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Context {
    pub home: PathBuf,
    /// `$ALMANAC_HOME`, default `~/.codealmanac`: config, user rules, state, logs.
    pub almanac_home: PathBuf,
    pub now: DateTime<Utc>,
    vars: HashMap<String, String>,
    /// `[stores]` of `config.toml`, read when first needed (a walk of the stores asks).
    stores: std::sync::OnceLock<crate::config::StoreSettings>,
}

impl Context {
    pub fn from_env() -> anyhow::Result<Context> {
        let vars: HashMap<String, String> = std::env::vars().collect();
        let home = crate::platform::HOME_VARS
            .iter()
            .find_map(|v| vars.get(*v).filter(|h| !h.is_empty()))
            .map(PathBuf::from)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{} is not set: almanac needs it to find transcript stores",
                    crate::platform::HOME_VARS.join(" or ")
                )
            })?;
        let almanac_home = match vars.get("ALMANAC_HOME").filter(|h| !h.is_empty()) {
            Some(h) => crate::util::paths::expand_home(h, &home),
            None => home.join(".codealmanac"),
        };
        crate::ledger::seal::use_homes(&home, &almanac_home);
        crate::rules::views::use_views_root(almanac_home.join("state/views"));
        Ok(Context {
            home,
            almanac_home,
            now: Utc::now(),
            vars,
            stores: std::sync::OnceLock::new(),
        })
    }

    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    pub fn config_path(&self) -> PathBuf {
        self.almanac_home.join("config.toml")
    }

    /// `[stores]` of `config.toml`, read once; a config that does not read gives the defaults (the
    /// commands that load the config report it).
    pub fn store_settings(&self) -> &crate::config::StoreSettings {
        self.stores.get_or_init(|| {
            crate::config::load(&self.config_path())
                .map(|c| c.stores)
                .unwrap_or_default()
        })
    }

    /// A path from the config, `~` expanded.
    pub fn config_path_value(&self, text: &str) -> PathBuf {
        crate::util::paths::normalize(&crate::util::paths::expand_home(text, &self.home))
    }
}
