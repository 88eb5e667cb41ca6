//! The Lua scripts of `crates/store/src/lua/`, each with the shared prelude in front.
//! They are called by SHA (EVALSHA) and loaded again when Redis lost them.

use std::sync::OnceLock;

use redis::Cmd;

pub(super) struct Lua {
    source: &'static str,
    sha: String,
}

impl Lua {
    fn new(source: &'static str) -> Self {
        let sha = redis::Script::new(source).get_hash().to_owned();
        Self { source, sha }
    }

    /// `EVALSHA <sha> 1 <key>`; add the ARGV with `.arg(..)`.
    pub(super) fn call(&self, key: &str) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(1).arg(key);
        cmd
    }

    /// `EVALSHA <sha> <n> <keys...>`; add the ARGV with `.arg(..)`.
    pub(super) fn call_keys(&self, keys: &[String]) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(keys.len()).arg(keys);
        cmd
    }

    pub(super) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }
}

macro_rules! lua {
    ($file:literal) => {
        Lua::new(concat!(
            include_str!("../lua/prelude.lua"),
            "\n",
            include_str!(concat!("../lua/", $file))
        ))
    };
}

/// A script without the task prelude (the outbox's own).
macro_rules! lua_plain {
    ($file:literal) => {
        Lua::new(include_str!(concat!("../lua/", $file)))
    };
}

pub(super) struct Scripts {
    pub(super) create: Lua,
    pub(super) set_message: Lua,
    pub(super) add_input: Lua,
    pub(super) withdraw_input: Lua,
    pub(super) set_state: Lua,
    pub(super) accept: Lua,
    pub(super) take_answers: Lua,
    pub(super) finish: Lua,
    pub(super) cancel: Lua,
    pub(super) fail_owned: Lua,
    pub(super) take_over: Lua,
    pub(super) outbox_claim: Lua,
    pub(super) outbox_settle: Lua,
    pub(super) outbox_redeliver: Lua,
}

impl Scripts {
    pub(super) fn get() -> &'static Scripts {
        static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
        SCRIPTS.get_or_init(|| Scripts {
            create: lua!("create.lua"),
            set_message: lua!("set_message.lua"),
            add_input: lua!("add_input.lua"),
            withdraw_input: lua!("withdraw_input.lua"),
            set_state: lua!("set_state.lua"),
            accept: lua!("accept.lua"),
            take_answers: lua!("take_answers.lua"),
            finish: lua!("finish.lua"),
            cancel: lua!("cancel.lua"),
            fail_owned: lua!("fail_owned.lua"),
            take_over: lua!("take_over.lua"),
            outbox_claim: lua_plain!("outbox_claim.lua"),
            outbox_settle: lua_plain!("outbox_settle.lua"),
            outbox_redeliver: lua_plain!("outbox_redeliver.lua"),
        })
    }

    pub(super) fn all(&self) -> [&Lua; 14] {
        [
            &self.create,
            &self.set_message,
            &self.add_input,
            &self.withdraw_input,
            &self.set_state,
            &self.accept,
            &self.take_answers,
            &self.finish,
            &self.cancel,
            &self.fail_owned,
            &self.take_over,
            &self.outbox_claim,
            &self.outbox_settle,
            &self.outbox_redeliver,
        ]
    }
}
