//! The Lua scripts under `src/store/lua/`, each with the shared prelude in front.
//! They are called by SHA (EVALSHA) and loaded again when Redis lost them.

use std::sync::OnceLock;

use redis::Cmd;

pub struct Lua {
    source: &'static str,
    sha: String,
}

impl Lua {
    fn new(source: &'static str) -> Self {
        let sha = redis::Script::new(source).get_hash().to_owned();
        Self { source, sha }
    }

    /// `EVALSHA <sha> 1 <key>`; add the ARGV with `.arg(..)`.
    pub fn call(&self, key: &str) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(1).arg(key);
        cmd
    }

    pub fn load_cmd(&self) -> Cmd {
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

pub struct Scripts {
    pub create: Lua,
    pub set_message: Lua,
    pub add_input: Lua,
    pub withdraw_input: Lua,
    pub set_state: Lua,
    pub accept: Lua,
    pub take_answers: Lua,
    pub finish: Lua,
    pub cancel: Lua,
    pub fail_owned: Lua,
    pub take_over: Lua,
}

impl Scripts {
    pub fn get() -> &'static Scripts {
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
        })
    }

    pub fn all(&self) -> [&Lua; 11] {
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
        ]
    }
}
